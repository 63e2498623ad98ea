"""Loading a user's model from the command line: `FILE.py:FACTORY` or `package.module:FACTORY`.

`FACTORY()` returns `(model, example_inputs)` or `(model, example_inputs, dynamic_shapes)`; the
module may define `SAMPLES[FACTORY]` (a list of input tuples, or a callable that builds one) for
`verify` and `bench`. `cli`, `verify` and `bench` all load models through this module.

Example:
    >>> model, example_inputs, dynamic_shapes, name = load_factory("models/programs.py:early_exit")  # doctest: +SKIP
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from host_runtime.errors import DyclError

# User files are imported under this prefix, so that a file named like a stdlib module does not
# shadow it and `torch.jit.script` finds classes' source through `sys.modules`.
USER_MODULE_PREFIX = "_dycl_user_"


def split_spec(spec: str) -> tuple[str, str]:
    """`"a/b.py:f"` -> `("a/b.py", "f")`; the module part may also be `package.module`."""
    module_part, colon, factory_name = spec.rpartition(":")
    if not colon or not module_part or not factory_name:
        raise DyclError(f"expected FILE.py:FACTORY or package.module:FACTORY, got {spec!r}")
    return module_part, factory_name


def import_module(module_part: str) -> ModuleType:
    """Import `FILE.py` (registered in `sys.modules` before it runs) or a dotted module name."""
    if module_part.endswith(".py") or "/" in module_part or "\\" in module_part:
        path = Path(module_part)
        if not path.is_file():
            raise DyclError(f"{path}: no such file")
        # Let the file import its neighbours and the package it sits in, as `python FILE.py` would.
        for folder in (str(Path.cwd()), str(path.resolve().parent.parent), str(path.resolve().parent)):
            if folder not in sys.path:
                sys.path.insert(0, folder)
        module_name = USER_MODULE_PREFIX + path.stem
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        if module_spec is None or module_spec.loader is None:
            raise DyclError(f"{path}: cannot be imported as Python")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        module_spec.loader.exec_module(module)
        return module
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(module_part)
    except ModuleNotFoundError as error:
        hint = "give FILE.py:FACTORY or package.module:FACTORY"
        raise DyclError(f"no module {module_part!r} ({error}); {hint}") from error


def find_factory(spec: str) -> tuple[ModuleType, Callable[..., Any], str]:
    """The module and the factory function a spec names; a typo gets the close names suggested."""
    module_part, factory_name = split_spec(spec)
    module = import_module(module_part)
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        names = [name for name, value in vars(module).items() if callable(value) and not name.startswith("_")]
        close = difflib.get_close_matches(factory_name, names, n=3)
        hint = f"; did you mean {' or '.join(repr(name) for name in close)}?" if close else ""
        raise DyclError(f"{module_part} defines no function {factory_name!r}{hint}")
    return module, factory, factory_name


def load_factory(spec: str) -> tuple[Any, tuple, Any, str]:
    """`FILE.py:FACTORY` -> (model, example_inputs, dynamic_shapes, name)."""
    _, factory, factory_name = find_factory(spec)
    made = factory()
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise DyclError(f"{spec} must return (model, example_inputs) or (model, example_inputs, dynamic_shapes)")
    model, example_inputs = made[0], made[1]
    dynamic_shapes = made[2] if len(made) == 3 else None
    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    return model, example_inputs, dynamic_shapes, factory_name


def samples_of(module: ModuleType, factory_name: str) -> Any:
    """The module's `SAMPLES[factory_name]` as given (a list, a callable building one, or None)."""
    samples = getattr(module, "SAMPLES", None)
    if isinstance(samples, dict):
        return samples.get(factory_name)
    return None


def load_samples(spec: str) -> list[tuple] | None:
    """The SAMPLES entry for a factory whose module `load_factory` imported, built into a list."""
    module_part, factory_name = split_spec(spec)
    module = import_module_cached(module_part)
    samples = samples_of(module, factory_name) if module is not None else None
    if samples is None:
        return None
    return list(samples() if callable(samples) else samples)


def import_module_cached(module_part: str) -> ModuleType | None:
    """The module `import_module` already imported for this spec, if any."""
    if module_part.endswith(".py") or "/" in module_part:
        return sys.modules.get(USER_MODULE_PREFIX + Path(module_part).stem)
    return sys.modules.get(module_part)
