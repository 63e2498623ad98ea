"""Every command of README.md runs as written, in order, on a fresh copy of the repository.

The test runs the README's fenced ```sh / ```bash and ```python blocks top to bottom in one folder
(a copy of the files git knows, as a fresh clone has them), with this environment's Python and IREE
tools first on PATH. An HTML comment right before a block changes how it runs:

    <!-- readme-test: skip (why) -->     never run here (say why: it installs, it is the test suite, ...)
    <!-- readme-test: slow -->           run only with DYCL_README_SLOW=1 (a long benchmark, a big export)
    <!-- readme-test: gpu -->            run only where host_runtime.available_devices() has cuda
    <!-- readme-test: vulkan -->         run only where it has vulkan

Indented code blocks are prose examples and are not run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import host_runtime

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(
    r"(?:<!--\s*readme-test:\s*(?P<marker>[a-z]+)(?P<reason>[^>]*)-->\s*\n)?"
    r"^(?P<indent>[ \t]*)```(?P<language>sh|bash|shell|python)[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.M | re.S,
)
_MARKERS = {"skip", "slow", "gpu", "vulkan"}


@dataclass
class Block:
    line: int
    language: str
    code: str
    marker: str | None
    reason: str


def readme_blocks(text: str) -> list[Block]:
    """The fenced shell and Python blocks of a README, in order, with their markers."""
    blocks = []
    for match in _BLOCK.finditer(text):
        indent = match.group("indent")
        lines = match.group("body").splitlines(True)
        code = "".join(line[len(indent) :] if line.startswith(indent) else line for line in lines)
        marker = match.group("marker")
        if marker is not None and marker not in _MARKERS:
            raise ValueError(f"README.md line {text[: match.start()].count(chr(10)) + 1}: unknown marker {marker!r}")
        language = "python" if match.group("language") == "python" else "sh"
        line = text[: match.start("body")].count("\n") + 1
        blocks.append(Block(line, language, code, marker, (match.group("reason") or "").strip()))
    return blocks


def test_the_block_parser_reads_markers_and_indented_fences() -> None:
    text = (
        "intro\n\n<!-- readme-test: skip (installs) -->\n```sh\nmake x\n```\n\n"
        "* item:\n\n  ```sh\n  echo one \\\n      two\n  ```\n\n```python\nprint(1)\n```\n\n    indented prose\n"
    )
    blocks = readme_blocks(text)
    assert [(b.language, b.code, b.marker, b.reason) for b in blocks] == [
        ("sh", "make x\n", "skip", "(installs)"),
        ("sh", "echo one \\\n    two\n", None, ""),
        ("python", "print(1)\n", None, ""),
    ]


def _skip_reason(block: Block, devices: list[str]) -> str | None:
    if block.marker == "skip":
        return block.reason or "marked skip"
    if block.marker == "slow" and not os.environ.get("DYCL_README_SLOW"):
        return "slow (DYCL_README_SLOW=1 runs it)"
    if block.marker == "gpu" and "cuda" not in devices:
        return "needs a CUDA device"
    if block.marker == "vulkan" and "vulkan" not in devices:
        return "needs a Vulkan device"
    return None


def _fresh_copy(destination: Path) -> Path:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (item.decode() for item in listed)):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def test_every_readme_command_runs_in_order_on_a_fresh_copy(tmp_path: Path) -> None:
    blocks = readme_blocks((ROOT / "README.md").read_text())
    assert len(blocks) >= 5, "README.md lost its commands"
    copy = _fresh_copy(tmp_path / "clone")
    tools = str(Path(sys.executable).parent)
    env = {
        key: value for key, value in os.environ.items() if key in ("HOME", "LANG", "DYCL_IREE_CACHE", "XDG_CACHE_HOME")
    }
    env.update({"PATH": f"{tools}:/usr/bin:/bin", "VIRTUAL_ENV": str(Path(tools).parent)})
    devices = host_runtime.available_devices()
    ran, skipped = [], []
    for index, block in enumerate(blocks):
        reason = _skip_reason(block, devices)
        if reason is not None:
            skipped.append((block.line, reason))
            continue
        if block.language == "python":
            script = copy / f"readme_block_{index}.py"
            script.write_text(block.code)
            command = [sys.executable, script.name]
        else:
            command = ["bash", "-e", "-o", "pipefail", "-c", block.code]
        result = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, (
            f"README.md line {block.line} failed ({result.returncode}):\n{block.code}\n"
            f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
        )
        ran.append(block.line)
    # The commands the Use section promises ran (not only skipped ones).
    assert len(ran) >= 4, (ran, skipped)
    assert all(reason for _, reason in skipped)
    assert (copy / "early_exit.dycl" / "manifest.json").is_file() and (copy / "outputs.npz").is_file()


if __name__ == "__main__":  # list what the test would run
    for block in readme_blocks((ROOT / "README.md").read_text()):
        print(f"line {block.line}: {block.language} {block.marker or ''} {block.reason}")
