"""The package's modules import each other without cycles, and the light entry points stay light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dycl_iree", "host_runtime")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of ours that `name` imports, at its top or inside its functions (`TYPE_CHECKING` aside).

    Function-level imports count: two modules that import each other inside functions are one
    concern split in two (as `cli` and `verify` were), however Python resolves it at run time.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    imported: set[str] = set()
    tree = ast.parse(path.read_text())
    type_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                imported.add(target)
    return imported


def test_no_module_imports_itself_through_others():
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    # A package's __init__ imports its submodules and each submodule imports its package first:
    # that edge is Python's import order, not a cycle between concerns.
    for name in graph:
        graph[name] = {target for target in graph[name] if not name.startswith(target + ".")}
    cycles = []

    def visit(name: str, path: list[str]) -> None:
        for target in sorted(graph[name]):
            if target in path:
                cycles.append(" -> ".join(path[path.index(target) :] + [target]))
            elif target not in done:
                visit(target, path + [target])
        done.add(name)

    done: set[str] = set()
    for name in sorted(graph):
        visit(name, [name])
    assert not cycles, "import cycles:\n" + "\n".join(sorted(set(cycles)))
    # The check sees real edges (it would be vacuous on an empty graph).
    assert "dycl_iree.loading" in graph["dycl_iree.cli"] and "dycl_iree.loading" in graph["dycl_iree.verify"]
    assert "dycl_iree.specialize" in graph["dycl_iree.pipeline"]


def test_every_module_imports():
    """The static check above decides cycles; this one catches a module that fails to import at all."""
    modules = sorted(name for name in _modules() if not name.endswith("__main__"))
    program = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    result = subprocess.run([sys.executable, "-c", program, *modules], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]


def test_load_and_the_runtime_do_not_import_torch():
    program = "import sys, dycl_iree, host_runtime\ndycl_iree.load\nprint('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
