"""Emit C: a typed C function per bundle, over the C runtime in `host_runtime/c/dycl_runtime.h`.

From a bundle's manifest (nothing else is read, and torch is not imported) this writes
`<name>.h` / `<name>.c`: the signature of the compiled host's `main` as a `dycl_signature_t`,
`<name>_create` (the vmfb embedded with iree-c-embed-data as `<name>_vmfb`), and `<name>_run`,
whose parameters are the model's inputs and outputs in C types:

* a tensor input is a typed pointer (`const float* x`) followed by one `int64_t x_dim<d>` per
  dynamic dim; a tensor output is a typed pointer, and where its size varies also its capacity
  (elements) and one `int64_t* <output>_dim<d>` per dynamic dim, set by the call;
* int, float and bool inputs are `int64_t`, `float` and `bool` (IREE demotes Python floats to
  f32); scalar outputs are pointers to them. `main` itself takes and returns them as 0-d tensors
  (the manifest's `main_abi` 2); the C runtime converts, and the generated code refuses to compile
  against a `dycl_runtime.h` of another main_abi;
* a model that draws random numbers (main_abi 3) also takes its generator's state, `const int32_t*
  random_state` (two words) after its inputs, and returns the next one, `int32_t* next_random_state`
  after its outputs: the caller keeps it (`<NAME>_RANDOM_STATE(seed)` starts a seed's stream);
* structured outputs are flat, in the order of the model's output (the header shows the structure
  over the C names): a dict or NamedTuple is one output per key or field, named
  `output<i>_<key>`; an Optional decided at run time is a `bool* output<i>_has_value` flag
  followed by its value's outputs, which hold a stand-in (zeros) where the flag is false; a dict
  key the model sets on some paths only has such a flag too (`output<i>_has_value` before it);
  None is no output at all;
* an input exported as None (an `Optional` input whose example was None) is no parameter: the
  function runs the model as called with None there, and the header says so.

The runtime checks every input against the signature (rank, static sizes, dynamic sizes,
capacity) before any device work. `<name>_run_values` is the same call with generic values, for
tools that read inputs from files (examples/edge_app).

    python -m dycl_iree.emit_c early_exit.dycl -o generated/ [--name early_exit] [--cpu aarch64]

Example:
    >>> c_identifier("early-exit.v2"), c_identifier("int")
    ('early_exit_v2', 'int_')
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from host_runtime.bundle_format import MAIN_ABI, check_file, check_main_abi, read_manifest, select_cpu_target
from host_runtime.errors import BundleError, DyclError
from host_runtime.output_tree import describe_tree, leaf_labels
from host_runtime.runner import reuses_buffers

_C_TYPES = {
    "float32": "float",
    "float64": "double",
    "float16": "uint16_t",
    "int64": "int64_t",
    "int32": "int32_t",
    "int16": "int16_t",
    "int8": "int8_t",
    "uint8": "uint8_t",
    "bool": "bool",
}
_SCALAR_C_TYPES = {"int": "int64_t", "float": "float", "bool": "bool"}
_KINDS = {"tensor": "DYCL_KIND_TENSOR", "int": "DYCL_KIND_INT", "float": "DYCL_KIND_FLOAT", "bool": "DYCL_KIND_BOOL"}
_SCALAR_VALUE = {"int": ("dycl_value_int(0)", "i64"), "float": ("dycl_value_float(0.0f)", "f32"),
                 "bool": ("dycl_value_bool(false)", "boolean")}
_C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int long "
    "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while "
    "bool true false".split()
)
# Names the generated functions use for their own parameters and locals.
_RESERVED = frozenset({"model", "inputs", "outputs", "status"})


def c_identifier(text: str) -> str:
    """`text` as a C identifier: other characters become `_`, a keyword gets a trailing `_`."""
    name = re.sub(r"\W", "_", text, flags=re.ASCII) or "_"
    if name[0].isdigit():
        name = "_" + name
    return name + "_" if name in _C_KEYWORDS else name


@dataclass(frozen=True)
class CValue:
    """One input or output of `main`, with the C names the generated code gives it."""

    name: str  # C identifier, unique in the function
    label: str  # what the manifest calls it
    kind: str  # tensor, int, float, bool
    dtype: str | None
    shape: tuple[int | None, ...]

    @property
    def dynamic_dims(self) -> list[int]:
        return [dim for dim, size in enumerate(self.shape) if size is None]

    @property
    def c_type(self) -> str:
        return _C_TYPES[self.dtype] if self.kind == "tensor" else _SCALAR_C_TYPES[self.kind]

    def dims(self) -> str:
        """The shape as C expressions: a static size, or the parameter that holds a dynamic one."""
        return ", ".join(f"{self.name}_dim{d}" if size is None else str(size) for d, size in enumerate(self.shape))

    def describe(self) -> str:
        return f"{self.dtype}[{self.dims()}]" if self.kind == "tensor" else self.kind


def _values(specs: list[dict[str, Any]], labels: list[str], taken: set[str], where: str) -> list[CValue]:
    values = []
    for spec, label in zip(specs, labels):
        kind = spec["kind"]
        if kind not in _KINDS:
            raise BundleError(f"{where} {label!r} is a {kind}, which the compiled host does not return")
        if kind == "tensor" and spec["dtype"] not in _C_TYPES:
            raise BundleError(f"{where} {label!r} has dtype {spec['dtype']}, which the C runtime does not carry")
        name = c_identifier(label)
        while name in taken or name in _RESERVED:
            name += "_"
        taken.add(name)
        shape = tuple(spec.get("shape", ())) if kind == "tensor" else ()
        values.append(CValue(name, label, kind, spec.get("dtype") if kind == "tensor" else None, shape))
    return values


@dataclass(frozen=True)
class CBundle:
    """What the generated code needs from a manifest."""

    name: str
    model: str
    module_name: str
    target: str
    vmfb: Path
    inputs: list[CValue]
    outputs: list[CValue]
    structure: str = ""  # what the model returns, over the outputs' C names
    flagged: bool = False  # some output is an Optional's or a dict key's has_value flag
    # The model draws random numbers: the last input is the generator's state, the last output the next.
    random_state: bool = False
    # Inputs exported as None, which the function does not take: (name, declared type).
    none_inputs: tuple[tuple[str, str], ...] = ()
    # The C runtime caches transient buffers by default (`host_runtime.runner.reuses_buffers`).
    reuse_buffers: bool = False


def describe_bundle(path: str | Path, name: str | None = None, cpu: str | None = None,
                    target: str | None = None) -> CBundle:
    """Read a bundle for C: its compiled host's signature and the vmfb for `target` (or for CPU `cpu`).

    With neither, the bundle's only CPU target or the one for this machine's CPU.
    """
    import platform

    root, manifest = read_manifest(path)
    if manifest["host"] != "compiled":
        reason = manifest.get("compiled_host_unsupported") or "not built"
        raise BundleError(f"{root}: has no compiled host ({reason}); the C runtime runs only the compiled `main`")
    check_main_abi(root, manifest)
    if target is None:
        target = select_cpu_target(root, manifest, cpu or platform.machine())
    elif target not in manifest["targets"]:
        raise BundleError(f"{root}: has no target {target!r}; it has {', '.join(manifest['targets'])}")
    vmfb = check_file(root, manifest, manifest["targets"][target]["file"])
    stem = root.name[: -len(".dycl")] if root.name.endswith(".dycl") else root.name
    name = c_identifier(name or stem)
    taken: set[str] = set()
    # An input exported as None is no argument of `main` (host_runtime/none_inputs.py).
    none_inputs = tuple((spec["name"], spec["declared"]) for spec in manifest["inputs"] if spec["kind"] == "none")
    input_specs = [spec for spec in manifest["inputs"] if spec["kind"] != "none"]
    input_labels = [spec["name"] for spec in input_specs]
    leaves, tree = list(manifest["outputs"]["leaves"]), manifest["outputs"]["tree"]
    output_labels = leaf_labels(tree, len(leaves))
    random_state = bool(manifest.get("random_state"))
    if random_state:
        # main_abi 3 is main_abi 2 with the random state (two int32 words) after the inputs and its
        # next value after the outputs: in C, one more tensor of each, which the caller keeps.
        state = {"kind": "tensor", "dtype": "int32", "shape": [2]}
        input_specs.append(state)
        input_labels.append("random_state")
        leaves.append(state)
        output_labels.append("next_random_state")
    inputs = _values(input_specs, input_labels, taken, "input")
    outputs = _values(leaves, output_labels, taken, "output")
    structure = describe_tree(tree, [value.name for value in outputs])
    flagged = any(value.label.endswith("_has_value") for value in outputs)
    model, module_name = manifest["model"], manifest["module_name"]
    reuse = reuses_buffers(manifest, "local-sync")
    return CBundle(
        name, model, module_name, target, vmfb, inputs, outputs, structure, flagged, random_state, none_inputs, reuse
    )


# -- the header ---------------------------------------------------------------------------------------


def _structure_lines(bundle: CBundle) -> list[str]:
    """The model's output structure over the C outputs, and how an Optional or dict appears in C."""
    if not bundle.structure:
        return []
    lines = ["// The model returns (Python notation, over the outputs above):", f"//   {bundle.structure}"]
    if bundle.flagged:
        lines += [
            "// An Optional (or a dict key the model sets on some paths only) is a has_value flag beside",
            "// its value's outputs; where the flag is false the value's buffers hold zeros, not data.",
        ]
    return lines


def _parameters(bundle: CBundle) -> list[str]:
    parameters = ["dycl_model_t* model"]
    for value in bundle.inputs:
        if value.kind == "tensor":
            parameters.append(f"const {value.c_type}* {value.name}")
            parameters += [f"int64_t {value.name}_dim{d}" for d in value.dynamic_dims]
        else:
            parameters.append(f"{value.c_type} {value.name}")
    for value in bundle.outputs:
        parameters.append(f"{value.c_type}* {value.name}")
        if value.kind == "tensor" and value.dynamic_dims:
            parameters.append(f"iree_host_size_t {value.name}_capacity")
            parameters += [f"int64_t* {value.name}_dim{d}" for d in value.dynamic_dims]
    return parameters


def _element_count(value: CValue) -> int:
    count = 1
    for size in value.shape:
        count *= size
    return count


def _prototype(bundle: CBundle) -> str:
    head = f"iree_status_t {bundle.name}_run("
    return head + (",\n" + " " * len(head)).join(_parameters(bundle)) + ")"


def header(bundle: CBundle) -> str:
    guard = f"{bundle.name.upper()}_H_"
    upper = bundle.name.upper()
    lines = [
        f"// Generated by dycl_iree.emit_c from a bundle of {bundle.model} (target {bundle.target}); do not edit.",
        f"// The compiled host `{bundle.module_name}.main`, as a typed C function over dycl_runtime.h.",
        "//",
        "// Inputs:",
        *[f"//   {value.name}: {value.describe()}" for value in bundle.inputs],
        *[
            f"//   ({name}: {declared}, exported as None: no parameter; the model runs with {name}=None)"
            for name, declared in bundle.none_inputs
        ],
        "// Outputs:",
        *[f"//   {value.name}: {value.describe()}" for value in bundle.outputs],
        *_structure_lines(bundle),
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        '#include "dycl_runtime.h"',
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        "// What `main` takes and returns; every call is checked against it before any device work.",
        f"extern const dycl_signature_t {bundle.name}_signature;",
        "",
    ]
    if bundle.random_state:
        lines += [
            f"// {bundle.model} draws random numbers. Its generator's state is |random_state| (the seed's word",
            "// and a draw counter): start from `int32_t state[2] = "
            f"{upper}_RANDOM_STATE(seed);` and pass each call's",
            "// |next_random_state| to the next; a seed draws the numbers `load(..., seed=seed)` draws in Python.",
            f"#define {upper}_RANDOM_STATE(seed) {{(int32_t)(uint32_t)(seed), 0}}",
            "",
        ]
    static_outputs = [v for v in bundle.outputs if v.kind == "tensor" and not v.dynamic_dims]
    if static_outputs:
        lines.append("// Elements of the outputs whose shape is static (the buffers |run| writes).")
        lines += [f"#define {upper}_{v.name.upper()}_ELEMENTS {_element_count(v)}" for v in static_outputs]
        lines.append("")
    lines += [
        f"// Loads the vmfb embedded in this library (target {bundle.target}) onto |options|' device",
        "// (NULL: local-sync). Release the model with dycl_model_release.",
        f"iree_status_t {bundle.name}_create(const dycl_model_options_t* options, dycl_model_t** out_model);",
        "",
        "// Loads the same bundle's vmfb from a file instead (e.g. to update the network without relinking).",
        f"iree_status_t {bundle.name}_create_from_file(const dycl_model_options_t* options, const char* vmfb_path,",
        f"{' ' * (len(bundle.name) + 33)}dycl_model_t** out_model);",
        "",
        f"// Runs {bundle.model}. Tensors are dense, row-major; inputs are read, outputs written.",
    ]
    for value in bundle.inputs:
        given = ", ".join(f"{value.name}_dim{d}" for d in value.dynamic_dims)
        lines.append(f"//   {value.name}: {value.describe()}" + (f", with {given}" if given else ""))
    for value in bundle.outputs:
        if value.kind == "tensor" and value.dynamic_dims:
            dims = ", ".join(f"*{value.name}_dim{d}" for d in value.dynamic_dims)
            lines.append(f"//   {value.name}: {value.describe()}, holds {value.name}_capacity elements; sets {dims}")
        elif value.kind == "tensor":
            lines.append(f"//   {value.name}: {value.describe()}, holds {upper}_{value.name.upper()}_ELEMENTS elements")
        else:
            lines.append(f"//   {value.name}: {value.describe()}")
    lines += [
        "// Returns IREE_STATUS_INVALID_ARGUMENT for inputs that do not fit the signature (nothing runs) and",
        "// IREE_STATUS_RESOURCE_EXHAUSTED when a result exceeds its capacity (its dims are still set).",
        _prototype(bundle) + ";",
        "",
        "// The same call with generic values in signature order (e.g. read from files).",
        f"iree_status_t {bundle.name}_run_values(dycl_model_t* model, const dycl_value_t* inputs,",
        f"{' ' * (len(bundle.name) + 25)}dycl_value_t* outputs);",
        "",
        "#ifdef __cplusplus",
        '}  // extern "C"',
        "#endif",
        "",
        f"#endif  // {guard}",
        "",
    ]
    return "\n".join(lines)


# -- the implementation -------------------------------------------------------------------------------


def _spec_table(bundle: CBundle, values: list[CValue], side: str) -> list[str]:
    lines = []
    for index, value in enumerate(values):
        if value.kind == "tensor" and value.shape:
            dims = ", ".join("DYCL_DYNAMIC_DIM" if size is None else str(size) for size in value.shape)
            lines.append(f"static const int64_t {bundle.name}_{side}{index}_shape[] = {{{dims}}};")
    lines.append(f"static const dycl_value_spec_t {bundle.name}_{side}[] = {{")
    for index, value in enumerate(values):
        dtype = f"DYCL_DTYPE_{value.dtype.upper()}" if value.kind == "tensor" else "DYCL_DTYPE_FLOAT32"
        shape = f"{bundle.name}_{side}{index}_shape" if value.kind == "tensor" and value.shape else "NULL"
        lines.append(f'    {{"{value.label}", {_KINDS[value.kind]}, {dtype}, {len(value.shape)}, {shape}}},')
    if not values:
        lines.append('    {"", DYCL_KIND_INT, DYCL_DTYPE_FLOAT32, 0, NULL},  // (none; C has no empty arrays)')
    lines.append("};")
    return lines


def _run_body(bundle: CBundle) -> list[str]:
    upper = bundle.name.upper()
    lines = [
        f"  if (!model || dycl_model_signature(model) != &{bundle.name}_signature) {{",
        "    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT,",
        f'                            "{bundle.name}_run: the model was not created by {bundle.name}_create");',
        "  }",
    ]
    pointers = [v.name for v in bundle.outputs if v.kind != "tensor"]
    pointers += [f"{v.name}_dim{d}" for v in bundle.outputs if v.kind == "tensor" for d in v.dynamic_dims]
    for pointer in pointers:
        lines += [
            f"  if (!{pointer}) {{",
            f'    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "{bundle.name}_run: {pointer} is NULL");',
            "  }",
        ]
    lines.append(f"  dycl_value_t inputs[{max(len(bundle.inputs), 1)}];")
    for index, value in enumerate(bundle.inputs):
        if value.kind == "tensor":
            shape = f"(const int64_t[]){{{value.dims()}}}" if value.shape else "NULL"
            lines.append(f"  inputs[{index}] = dycl_value_tensor({value.name}, {len(value.shape)}, {shape});")
        else:
            lines.append(f"  inputs[{index}] = dycl_value_{value.kind}({value.name});")
    lines.append(f"  dycl_value_t outputs[{max(len(bundle.outputs), 1)}];")
    for index, value in enumerate(bundle.outputs):
        if value.kind == "tensor":
            capacity = f"{value.name}_capacity" if value.dynamic_dims else f"{upper}_{value.name.upper()}_ELEMENTS"
            lines.append(f"  outputs[{index}] = dycl_value_output({value.name}, {capacity});")
        else:
            lines.append(f"  outputs[{index}] = {_SCALAR_VALUE[value.kind][0]};")
    lines.append("  iree_status_t status = dycl_model_call(model, inputs, outputs);")
    dims = [(i, v, d) for i, v in enumerate(bundle.outputs) if v.kind == "tensor" for d in v.dynamic_dims]
    if dims:
        lines.append("  // Sizes also when a result did not fit, so that the caller can grow its buffer.")
        lines.append("  if (iree_status_is_ok(status) || iree_status_code(status) == IREE_STATUS_RESOURCE_EXHAUSTED) {")
        lines += [f"    *{v.name}_dim{d} = outputs[{i}].tensor.shape[{d}];" for i, v, d in dims]
        lines.append("  }")
    scalars = [(i, v) for i, v in enumerate(bundle.outputs) if v.kind != "tensor"]
    if scalars:
        lines.append("  if (iree_status_is_ok(status)) {")
        lines += [f"    *{v.name} = outputs[{i}].{_SCALAR_VALUE[v.kind][1]};" for i, v in scalars]
        lines.append("  }")
    lines.append("  return status;")
    return lines


def _run_values_body(bundle: CBundle) -> list[str]:
    arguments = ["model"]
    for index, value in enumerate(bundle.inputs):
        if value.kind == "tensor":
            arguments.append(f"(const {value.c_type}*)inputs[{index}].tensor.data")
            arguments += [f"inputs[{index}].tensor.shape[{d}]" for d in value.dynamic_dims]
        else:
            arguments.append(f"inputs[{index}].{_SCALAR_VALUE[value.kind][1]}")
    for index, value in enumerate(bundle.outputs):
        if value.kind == "tensor":
            arguments.append(f"({value.c_type}*)outputs[{index}].tensor.data")
            if value.dynamic_dims:
                arguments.append(f"outputs[{index}].tensor.capacity")
                arguments += [f"&outputs[{index}].tensor.shape[{d}]" for d in value.dynamic_dims]
        else:
            arguments.append(f"&outputs[{index}].{_SCALAR_VALUE[value.kind][1]}")
    call = f"  iree_status_t status = {bundle.name}_run("
    lines = [
        f"  if (!model || dycl_model_signature(model) != &{bundle.name}_signature) {{",
        "    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT,",
        f'                            "{bundle.name}_run_values: the model was not created by {bundle.name}_create");',
        "  }",
        "  // Kinds and ranks first: the typed call below reads the values as the signature says.",
        "  IREE_RETURN_IF_ERROR(dycl_model_check(model, inputs, outputs));",
        call + (",\n" + " " * len(call)).join(arguments) + ");",
    ]
    for index, value in enumerate(bundle.outputs):
        if value.kind == "tensor":
            lines.append(f"  outputs[{index}].tensor.rank = {len(value.shape)};")
            lines += [f"  outputs[{index}].tensor.shape[{d}] = {size};" for d, size in enumerate(value.shape)
                      if size is not None]
    lines.append("  return status;")
    return lines


def implementation(bundle: CBundle) -> str:
    name = bundle.name
    lines = [
        f"// Generated by dycl_iree.emit_c from a bundle of {bundle.model} (target {bundle.target}); do not edit.",
        f'#include "{name}.h"',
        "",
        "// `main` takes and returns scalars as 0-d tensors (main_abi 2); the runtime must pass them so.",
        f"#if !defined(DYCL_MAIN_ABI) || DYCL_MAIN_ABI != {MAIN_ABI}",
        f'#error "generated for main_abi {MAIN_ABI}, but this dycl_runtime.h passes another (see DYCL_MAIN_ABI): '
        'build with the C runtime of the dycl_iree that exported the bundle"',
        "#endif",
        "",
        *_spec_table(bundle, bundle.inputs, "inputs"),
        *_spec_table(bundle, bundle.outputs, "outputs"),
        f"const dycl_signature_t {name}_signature = {{",
        f'    "{bundle.model}", "{bundle.module_name}", {len(bundle.inputs)}, {name}_inputs, '
        f"{len(bundle.outputs)}, {name}_outputs, {MAIN_ABI}, {'true' if bundle.reuse_buffers else 'false'},",
        "};",
        "",
        f"// The vmfb, embedded by iree-c-embed-data (dycl_add_bundle runs it); define {name.upper()}_NO_EMBEDDED_VMFB",
        "// to build without it and load the vmfb from a file.",
        f"#if !defined({name.upper()}_NO_EMBEDDED_VMFB)",
        f'#include "{name}_vmfb.h"',
        "",
        f"iree_status_t {name}_create(const dycl_model_options_t* options, dycl_model_t** out_model) {{",
        f"  const struct iree_file_toc_t* file = {name}_vmfb_create();",
        f"  return dycl_model_create_from_memory(options, &{name}_signature,",
        "                                       iree_make_const_byte_span(file->data, file->size), out_model);",
        "}",
        "#endif",
        "",
        f"iree_status_t {name}_create_from_file(const dycl_model_options_t* options, const char* vmfb_path,",
        f"{' ' * (len(name) + 33)}dycl_model_t** out_model) {{",
        f"  return dycl_model_create_from_file(options, &{name}_signature, vmfb_path, out_model);",
        "}",
        "",
        _prototype(bundle) + " {",
        *_run_body(bundle),
        "}",
        "",
        f"iree_status_t {name}_run_values(dycl_model_t* model, const dycl_value_t* inputs, dycl_value_t* outputs) {{",
        *_run_values_body(bundle),
        "}",
        "",
    ]
    return "\n".join(lines)


def emit_c(path: str | Path, output_dir: str | Path, name: str | None = None, cpu: str | None = None,
           target: str | None = None, copy_vmfb: bool = False) -> list[Path]:
    """Write `<name>.h` and `<name>.c` (and with `copy_vmfb`, `<name>.vmfb`) for a bundle; returns the paths.

    >>> emit_c("early_exit.dycl", "generated")        # doctest: +SKIP
    [PosixPath('generated/early_exit.h'), PosixPath('generated/early_exit.c')]
    """
    bundle = describe_bundle(path, name=name, cpu=cpu, target=target)
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / f"{bundle.name}.h", folder / f"{bundle.name}.c"]
    written[0].write_text(header(bundle))
    written[1].write_text(implementation(bundle))
    if copy_vmfb:
        written.append(Path(shutil.copyfile(bundle.vmfb, folder / f"{bundle.name}.vmfb")))
    return written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `emit-c` (shared by `python -m dycl_iree.emit_c` and the dycl_iree command line)."""
    parser.add_argument("bundle", help="a .dycl bundle folder")
    parser.add_argument("-o", "--output", required=True, help="folder for <name>.h and <name>.c")
    parser.add_argument("--name", help="C name of the model (default: the bundle's folder name)")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--cpu", help="pick the llvm-cpu vmfb for this CPU (default: this machine's)")
    choice.add_argument("--target", help="pick the vmfb of this target (e.g. llvm-cpu:aarch64-linux-gnu)")
    parser.add_argument("--copy-vmfb", action="store_true", help="also copy the chosen vmfb to <name>.vmfb")


def add_subcommand(commands: Any) -> None:
    """Add `emit-c` to the dycl_iree command line (`commands` is its subparsers object)."""
    parser = commands.add_parser(
        "emit-c",
        help="write a typed C function for a bundle (<name>.h / <name>.c over host_runtime/c)",
        description=__doc__.split("\n\n")[0],
        epilog="example: python -m dycl_iree emit-c early_exit.dycl -o generated/ --cpu aarch64",
    )
    add_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    for path in emit_c(args.bundle, args.output, args.name, args.cpu, args.target, args.copy_vmfb):
        print(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dycl_iree.emit_c", description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except DyclError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
