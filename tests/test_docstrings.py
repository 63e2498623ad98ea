"""Every docstring example of the exporter and the runtime runs and prints what it says: the
examples are the first documentation a reader tries (STYLE.md), so a stale one is a defect."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import dycl_iree
import host_runtime


def _modules() -> list[str]:
    names = []
    for package in (dycl_iree, host_runtime):
        names.append(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not info.name.endswith("__main__"):  # importing it runs the command line
                names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_the_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed (printed above)"
