"""Published model code loaded without its package's `__init__`.

torchaudio 2.11.1 (a test dependency, `pyproject.toml`) does not import with torch 2.13: its
`__init__` loads the C++ extension `lib/_torchaudio.so`, built against torch 2.11, and fails with
`OSError: Could not load this library`. Its model files are pure Python that imports only torch,
so each is loaded here as a module of its own from the installed file's path (importlib's
`spec_from_file_location`), without running `torchaudio/__init__.py` and without editing the
installed package.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _installed_file(package: str, relative: str) -> Path:
    """The path of `relative` inside the installed `package`, found without importing it."""
    spec = importlib.util.find_spec(package)  # reads the package's location; runs no __init__
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed (`make setup` installs the test dependencies)")
    return Path(next(iter(spec.submodule_search_locations))) / relative


def load_model_file(package: str, relative: str, name: str) -> ModuleType:
    """Load `package/relative` (a file that imports only torch) as the module `name`."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _installed_file(package, relative))
    module = importlib.util.module_from_spec(spec)
    # TorchScript finds a scripted class's globals through sys.modules[cls.__module__].
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def torchaudio_tacotron2() -> ModuleType:
    """torchaudio's `models/tacotron2.py` (`Tacotron2` and its `_Encoder`, `_Decoder`, `_Prenet`)."""
    return load_model_file("torchaudio", "models/tacotron2.py", "torchaudio_published.tacotron2")
