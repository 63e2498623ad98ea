"""The dynamic dims a user declares, with their names and ranges, as the manifest records them.

`dynamic_shapes` follows torch.export: per input (a tuple in forward order, or a dict by input
name), a dict from dim index to a spec, or a list with one spec per dim. A spec is a name (`"batch"`),
a `torch.export.Dim("batch", min=1, max=8)`, or `Dim.DYNAMIC` / `Dim.AUTO` (dynamic, no name). As in
torch.export, dims that share a name must be equal at run time, and a Dim's min/max bound its size:
the runtime checks both before any device work (`host_runtime.runner`).

Example:
    >>> declared_dims(("x",), ({0: "batch"},))
    [[{'dim': 0, 'name': 'batch', 'min': None, 'max': None}]]
"""

from __future__ import annotations

from typing import Any, Sequence

from .errors import SpecializeError


def declared_dims(input_names: Sequence[str], dynamic_shapes: Any) -> list[list[dict[str, Any]]]:
    """Per input, its dynamic dims as `{"dim", "name", "min", "max"}` (name/min/max may be None)."""
    count = len(input_names)
    if dynamic_shapes is None:
        return [[] for _ in range(count)]
    if isinstance(dynamic_shapes, dict):
        per_input = [dynamic_shapes.get(name) for name in input_names]
    else:
        per_input = list(dynamic_shapes)
        if len(per_input) != count:
            raise SpecializeError(f"dynamic_shapes has {len(per_input)} entries for {count} inputs")
    result = []
    for spec in per_input:
        if spec is None:
            result.append([])
            continue
        items = spec.items() if isinstance(spec, dict) else enumerate(spec)
        result.append([_dim(int(dim), value) for dim, value in items if value is not None])
    return result


def _dim(dim: int, spec: Any) -> dict[str, Any]:
    if isinstance(spec, str):
        return {"dim": dim, "name": spec, "min": None, "max": None}
    name = getattr(spec, "__name__", None)
    if name is None or type(spec).__name__ == "_DerivedDim":  # Dim.DYNAMIC / Dim.AUTO, or `2 * batch`
        return {"dim": dim, "name": None, "min": None, "max": None}
    low, high = getattr(spec, "min", None), getattr(spec, "max", None)
    return {
        "dim": dim,
        "name": name,
        # torch.export's defaults: min 0 and max int_oo (no bound).
        "min": int(low) if isinstance(low, int) and low > 0 else None,
        "max": int(high) if _finite(high) else None,
    }


def _finite(value: Any) -> bool:
    try:
        return isinstance(value, int) and value < 2**62
    except TypeError:  # torch's int_oo compares but is not an int
        return False


def check_examples(
    input_names: Sequence[str], shapes: Sequence[tuple[int, ...] | None], dims: list[list[dict[str, Any]]]
) -> None:
    """The example inputs must satisfy their own declared ranges and equal names, as torch.export demands."""
    sizes: dict[str, tuple[int, str]] = {}
    for name, shape, declared in zip(input_names, shapes, dims):
        for dim in declared:
            if shape is None or dim["dim"] >= len(shape):
                rank = "not a tensor" if shape is None else f"rank {len(shape)}"
                raise SpecializeError(f"dynamic_shapes declares dim {dim['dim']} of input {name!r}, which is {rank}")
            size = shape[dim["dim"]]
            where = f"input {name!r} dim {dim['dim']}"
            if (dim["min"] is not None and size < dim["min"]) or (dim["max"] is not None and size > dim["max"]):
                raise SpecializeError(
                    f"{where}: the example's size {size} is outside {dim['name']}'s range {range_text(dim)}"
                )
            if dim["name"] is None:
                continue
            if dim["name"] in sizes and sizes[dim["name"]][0] != size:
                other_size, other = sizes[dim["name"]]
                raise SpecializeError(
                    f"{where} and {other} share the name {dim['name']!r}, "
                    f"but the examples' sizes differ ({size}, {other_size})"
                )
            sizes.setdefault(dim["name"], (size, where))


def range_text(dim: dict[str, Any]) -> str:
    low = dim["min"] if dim["min"] is not None else 0
    return f"[{low}, {dim['max'] if dim['max'] is not None else 'inf'}]"
