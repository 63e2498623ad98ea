"""The call of a loaded bundle through its staging buffers (`staging.py`), written as straight-line
Python for each bundle.

For a small model this call is the whole per-call work besides IREE's own invoke, and on a tiny
program that work is as long as the invoke (~4 us each on local-sync): every loop over the inputs
and results, list comprehension and helper call costs ~0.2-0.5 us. So the call is generated once
per loaded bundle, the way `collections.namedtuple` writes its class: one copy line per input, the
invoke, one read per result, the result tree built in place. The code is made here, from the
manifest's signature, never taken from the bundle; `source` keeps it for reading.

Example of what the compiled host's call of `x + 1` becomes:

    def call(inputs):
        if len(inputs) != 1 or not try_acquire():
            return NOT_STAGED
        try:
            input0 = inputs[0]
            if type(input0) is ndarray and input0.dtype is input_dtype0 and input0.shape == shape0:
                array0[...] = input0
            else:
                array0[...] = check0(input0)
            try:
                invoke(function, arguments, results)
            except RuntimeError as error:
                raise_model_check(error)
            value0 = get(0, buffer_view)
            if value0.element_type == element_type0:
                output0 = ndarray(value0.shape, dtype0, value0.map()).copy()
            else:
                output0 = convert0(value0)
            return output0
        finally:
            release()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .invoke import element_type_of


@dataclass(frozen=True)
class StagedPlan:
    """What a staged call does, decided at load.

    `copies`: per input, its check and its staging array (None: passed as checked). `views`: per
    input, the staging's buffer view (None where not staged), which the Python host's `main` takes.
    `layouts`: per input, the (shape, dtype) of a staged tensor input (None for others): an array of
    exactly that type, dtype and shape is what its check passes unchanged, so the call copies it
    without calling the check (~0.2 us), and anything else goes through the check.
    `reads`: per output leaf, the numpy dtype it is read in place as (None: its converter only).
    """

    copies: list[tuple[Callable[[Any], Any], np.ndarray | None]]
    views: list[Any]
    layouts: list[tuple[tuple[int, ...], np.dtype] | None]
    converters: list[Callable[[Any], Any]]
    reads: list[np.dtype | None]
    tree: Any  # the manifest's output tree: a leaf index, a list of them, or nested records
    build: Callable[[list], Any]
    shared_dims: list
    check_shared_dims: Callable[[list, tuple], None]
    model_check_failed: Callable[[RuntimeError], Exception | None]
    not_staged: object


def staged_call(
    plan: StagedPlan,
    try_acquire: Callable[[], bool],
    release: Callable[[], None],
    python_main: Callable[..., tuple] | None = None,
    prepared: tuple[Any, Any, Any, Any] | None = None,
) -> Callable[[tuple], Any]:
    """The staged call as one generated closure: `call(inputs)` returns the outputs, or
    `plan.not_staged` without doing anything when the input count is wrong (the general path
    raises the error) or another thread's call holds the staging buffers.

    Either `prepared` (the compiled host: `invoke.prepared_invoke`'s invoke, function, argument
    list and results list; every input staged) or `python_main` (the Python host's main, which takes
    the staged views and the other inputs as checked) runs the model.
    """
    namespace: dict[str, Any] = {
        "try_acquire": try_acquire,
        "release": release,
        "NOT_STAGED": plan.not_staged,
        "ndarray": np.ndarray,
        "shared_dims": plan.shared_dims,
        "check_shared_dims": plan.check_shared_dims,
        "build": plan.build,
    }

    def raise_model_check(error: RuntimeError) -> None:
        failed = plan.model_check_failed(error)
        if failed is None:
            raise error
        raise failed from error

    namespace["raise_model_check"] = raise_model_check
    count = len(plan.copies)
    lines = [
        "def call(inputs):",
        f"    if len(inputs) != {count} or not try_acquire():",
        "        return NOT_STAGED",
        "    try:",  # the staging buffers are this call's until its results are host arrays
    ]
    arguments = []
    for index, ((check, array), view, layout) in enumerate(zip(plan.copies, plan.views, plan.layouts)):
        namespace[f"check{index}"] = check
        if array is None:
            lines.append(f"        argument{index} = check{index}(inputs[{index}])")
            arguments.append(f"argument{index}")
            continue
        namespace[f"array{index}"], namespace[f"view{index}"] = array, view
        arguments.append(f"view{index}")
        if layout is None:
            lines.append(f"        array{index}[...] = check{index}(inputs[{index}])")
            continue
        namespace[f"shape{index}"], namespace[f"input_dtype{index}"] = layout
        lines += [
            f"        input{index} = inputs[{index}]",
            # numpy's builtin dtypes are singletons: `is` is the check's own first test.
            f"        if type(input{index}) is ndarray and input{index}.dtype is input_dtype{index} "
            f"and input{index}.shape == shape{index}:",
            f"            array{index}[...] = input{index}",
            "        else:",
            f"            array{index}[...] = check{index}(input{index})",
        ]
    if plan.shared_dims:
        lines.append("        check_shared_dims(shared_dims, inputs)")
    if prepared is not None:
        namespace["invoke"], namespace["function"], namespace["arguments"], results = prepared
        namespace["get"] = results.get_as_object
        import iree.runtime as ireert

        namespace["buffer_view"], namespace["results"] = ireert.HalBufferView, results
        run = "invoke(function, arguments, results)"
    else:
        namespace["main"] = python_main
        run = f"results = main({', '.join(arguments)})"
    lines += [
        "        try:",
        f"            {run}",
        "        except RuntimeError as error:",
        "            raise_model_check(error)",
    ]
    for index, (convert, dtype) in enumerate(zip(plan.converters, plan.reads)):
        namespace[f"convert{index}"] = convert
        value = f"value{index}"
        source = f"get({index}, buffer_view)" if prepared is not None else f"results[{index}]"
        lines.append(f"        {value} = {source}")
        if dtype is None:
            lines.append(f"        output{index} = convert{index}({value})")
            continue
        namespace[f"dtype{index}"], namespace[f"element_type{index}"] = dtype, int(element_type_of(dtype))
        # A Python host may return a numpy array or None where the compiled host returns a buffer
        # view; `convert` reads those (and a view of another element type: IREE's bool is int8).
        element_type = f"{value}.element_type" if prepared is not None else f'getattr({value}, "element_type", None)'
        lines += [
            f"        if {element_type} == element_type{index}:",
            # See `invoke.to_numpy`: the view's elements from the start of its buffer's mapping.
            f"            output{index} = ndarray({value}.shape, dtype{index}, {value}.map()).copy()",
            "        else:",
            f"            output{index} = convert{index}({value})",
        ]
    outputs = [f"output{index}" for index in range(len(plan.converters))]
    if isinstance(plan.tree, int):
        lines.append(f"        return output{plan.tree}")
    elif isinstance(plan.tree, list) and plan.tree == list(range(len(plan.tree))):
        lines.append(f"        return ({''.join(f'output{leaf}, ' for leaf in plan.tree)})")
    else:
        lines.append(f"        return build([{', '.join(outputs)}])")
    lines += ["    finally:", "        release()"]
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<staged call>", "exec"), namespace)  # code written above, from the signature
    call = namespace["call"]
    call.source = source
    return call
