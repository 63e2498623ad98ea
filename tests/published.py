"""Published model code loaded without its package's `__init__`.

torchaudio 2.11.1 (a test dependency, `pyproject.toml`) does not import with torch 2.13: its
`__init__` loads the C++ extension `lib/_torchaudio.so`, built against torch 2.11, and fails with
`OSError: Could not load this library`. Its model files are pure Python that imports only torch,
so each is loaded here as a module of its own from the installed file's path (importlib's
`spec_from_file_location`), without running `torchaudio/__init__.py` and without editing the
installed package.
"""

from __future__ import annotations

import contextlib
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
    return _load_path(_installed_file(package, relative), name)


def _load_path(path: Path, name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # TorchScript finds a scripted class's globals through sys.modules[cls.__module__].
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def torchaudio_tacotron2() -> ModuleType:
    """torchaudio's `models/tacotron2.py` (`Tacotron2` and its `_Encoder`, `_Decoder`, `_Prenet`)."""
    return load_model_file("torchaudio", "models/tacotron2.py", "torchaudio_published.tacotron2")


@contextlib.contextmanager
def _package_stand_in(package: str, **names: object):
    """`package` (and its parents) as plain modules holding `names` while a file that does
    `from package import name` is loaded; the real package, whose `__init__` fails, is never run."""
    parts = package.split(".")
    added = []
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        if name not in sys.modules:
            sys.modules[name] = ModuleType(name)
            added.append(name)
    vars(sys.modules[package]).update(names)
    try:
        yield
    finally:
        for name in added:
            del sys.modules[name]


def torchaudio_rnnt() -> ModuleType:
    """torchaudio's `models/rnnt.py` (`RNNT`, `emformer_rnnt_model`) with `models/emformer.py`, which
    it imports as `from torchaudio.models import Emformer`: a stand-in `torchaudio.models` holding
    the loaded `Emformer` serves that import."""
    path = _installed_file("torchaudio", "models/rnnt.py")
    emformer = load_model_file("torchaudio", "models/emformer.py", "torchaudio_published.emformer")
    with _package_stand_in("torchaudio.models", Emformer=emformer.Emformer):
        return _load_path(path, "torchaudio_published.rnnt")


def torchaudio_rnnt_decoder() -> ModuleType:
    """torchaudio's `models/rnnt_decoder.py` (`RNNTBeamSearch`), which imports `RNNT` the same way."""
    path = _installed_file("torchaudio", "models/rnnt_decoder.py")
    rnnt = torchaudio_rnnt()
    with _package_stand_in("torchaudio.models", RNNT=rnnt.RNNT):
        return _load_path(path, "torchaudio_published.rnnt_decoder")


def torchaudio_conformer() -> ModuleType:
    """torchaudio's `models/conformer.py` (`Conformer`)."""
    return load_model_file("torchaudio", "models/conformer.py", "torchaudio_published.conformer")


def torchaudio_wav2letter() -> ModuleType:
    """torchaudio's `models/wav2letter.py` (`Wav2Letter`)."""
    return load_model_file("torchaudio", "models/wav2letter.py", "torchaudio_published.wav2letter")


def torchaudio_wavernn() -> ModuleType:
    """torchaudio's `models/wavernn.py` (`WaveRNN`)."""
    return load_model_file("torchaudio", "models/wavernn.py", "torchaudio_published.wavernn")


def torchaudio_wav2vec2_components() -> ModuleType:
    """torchaudio's `models/wav2vec2/components.py` (the feature extractor, `ConvLayerBlock` with its
    GroupNorm, the encoder), whose `from .wavlm_attention import ...` finds that file, loaded first,
    in a stand-in package."""
    with _package_stand_in("torchaudio_published"):
        _load_path(
            _installed_file("torchaudio", "models/wav2vec2/wavlm_attention.py"), "torchaudio_published.wavlm_attention"
        )
        return load_model_file(
            "torchaudio", "models/wav2vec2/components.py", "torchaudio_published.wav2vec2_components"
        )
