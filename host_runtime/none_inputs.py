"""Inputs a bundle was exported with as None: the call accepts only None for them, and drops them.

An `Optional[Tensor]` (or `Optional[int]`, ...) input of `forward` whose example was None is
specialized to None, as the export specializes to an example's dtype and rank: `state is None` folds
to True and the branch that sets it is the one compiled. Neither host takes it (`main` has no
argument for it), so the runner checks that each call passes None there, or leaves it out where
`forward` defaults it to None, as PyTorch allows, and removes it before the other inputs' checks.
A tensor there is refused with what to do instead: the bundle holds no code for a set value.

The manifest records each as `{"name": ..., "kind": "none", "declared": "Optional[Tensor]",
"default_none": true}`, in its place among the inputs.

Example:
    >>> specs = [{"name": "x", "kind": "tensor"}, {"name": "state", "kind": "none",
    ...           "declared": "Optional[Tensor]", "default_none": True}]
    >>> none = NoneInputs.of(specs, "model")
    >>> none.strip(("x value", None)), none.strip(("x value",))
    (('x value',), ('x value',))
"""

from __future__ import annotations

from typing import Any

from .errors import InputError

NONE_KIND = "none"


class NoneInputs:
    """The inputs of one bundle exported as None, and the per-call check that removes them."""

    def __init__(self, specs: list[dict[str, Any]], model: str) -> None:
        self.model = model
        self.count = len(specs)
        self.names = [spec["name"] for spec in specs]
        self.positions = [position for position, spec in enumerate(specs) if spec["kind"] == NONE_KIND]
        self.specs = specs
        # A call may stop before trailing inputs that default to None (`run(x)` for forward(x, state=None)).
        self.shortest = self.count
        while self.shortest > 0 and _omissible(specs[self.shortest - 1]):
            self.shortest -= 1

    @classmethod
    def of(cls, specs: list[dict[str, Any]], model: str) -> NoneInputs | None:
        """The bundle's None inputs, or None where it has none (the call then does no work for them)."""
        return cls(specs, model) if any(spec["kind"] == NONE_KIND for spec in specs) else None

    def taken(self) -> list[tuple[int, dict[str, Any]]]:
        """(position in `forward`, spec) of each input the hosts take."""
        return [(position, spec) for position, spec in enumerate(self.specs) if spec["kind"] != NONE_KIND]

    def strip(self, inputs: tuple) -> tuple:
        """The inputs without those exported as None, after checking each is None (or left out)."""
        if not self.shortest <= len(inputs) <= self.count:
            taken = ", ".join(self.names)
            expected = str(self.count) if self.shortest == self.count else f"{self.shortest} to {self.count}"
            raise InputError(f"{self.model} takes {expected} inputs ({taken}), got {len(inputs)}")
        for position in self.positions:
            if position < len(inputs) and inputs[position] is not None:
                spec = self.specs[position]
                raise InputError(
                    f"input {position} ({spec['name']!r}) was exported as None (its example was None; it is "
                    f"declared {spec.get('declared', 'Optional')}), so this bundle takes only None for it, got "
                    f"{type(inputs[position]).__name__}: export with a {_example_word(spec)} example for "
                    f"{spec['name']!r} to call it with one"
                )
        return tuple(value for position, value in enumerate(inputs) if position not in self.positions)

    def bind(self, positional: tuple, named: dict[str, Any]) -> tuple:
        """Named inputs in `forward` order, with None where one exported as None is left out."""
        unknown = [name for name in named if name not in self.names]
        if unknown:
            raise InputError(f"{self.model} has no input {unknown[0]!r}; its inputs are {', '.join(self.names)}")
        twice = [name for name in self.names[: len(positional)] if name in named]
        if twice:
            raise InputError(f"input {twice[0]!r} given both by position and by name")
        values = list(positional)
        for spec in self.specs[len(positional) :]:
            if spec["name"] in named:
                values.append(named[spec["name"]])
            elif _omissible(spec):
                values.append(None)
            else:
                names = ", ".join(self.names)
                raise InputError(f"{self.model} needs input {spec['name']!r}; its inputs are {names}")
        return tuple(values)


def _omissible(spec: dict[str, Any]) -> bool:
    return spec["kind"] == NONE_KIND and bool(spec.get("default_none"))


def _example_word(spec: dict[str, Any]) -> str:
    declared = str(spec.get("declared", ""))
    inner = declared[len("Optional[") : -1] if declared.startswith("Optional[") else "tensor"
    return "tensor" if inner == "Tensor" else inner
