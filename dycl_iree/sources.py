"""Source locations as a bundle records them: relative to the folder above the file's top-level package.

TorchScript names every node's source by absolute path (`/home/me/.venv/lib/python3.11/site-packages/
torch/nn/modules/linear.py:134`). A bundle keeps them (program.txt, host.py, the manifest, the
compiled host's locations inside the vmfb) without the path of the machine that built it: a file
inside a package is named from its top-level package (`torch/nn/modules/linear.py:134`,
`models/programs.py:43`), a file outside any package by its name alone. Error messages keep the
absolute path, which a reader can open.

Example:
    >>> relative_sources("x = 1    # /no/such/folder/programs.py:43")
    'x = 1    # programs.py:43'
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

# An absolute path to a .py file, not inside a word or a relative path.
_ABSOLUTE_PY = re.compile(r"(?<![\w.~/-])/(?:[^\s\"'`:/]+/)*[^\s\"'`:/]+\.py\b")


def relative_sources(text: str) -> str:
    """`text` with every absolute `.py` path rewritten relative to the folder above its package."""
    return _ABSOLUTE_PY.sub(lambda match: package_relative(match.group(0)), text)


@functools.lru_cache(maxsize=4096)
def package_relative(path: str) -> str:
    """`/a/b/site-packages/torch/nn/linear.py` -> `torch/nn/linear.py` (folders with `__init__.py` kept)."""
    file = Path(path)
    root = file.parent
    while (root / "__init__.py").is_file() and root.parent != root:
        root = root.parent
    return file.relative_to(root).as_posix()
