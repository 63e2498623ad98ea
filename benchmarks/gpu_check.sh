#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU: set up, export every zoo model for `cuda`,
# verify each one on IREE's cuda driver with both hosts against PyTorch, then benchmark the GPU
# candidates (PyTorch eager on CUDA, dycl_iree on IREE's cuda driver). About 5-10 minutes.
#
#   benchmarks/gpu_check.sh                  # everything, results in gpu-check-out/
#   MODELS=sdn_resnet56,ranet ROUNDS=3 benchmarks/gpu_check.sh
#
# Settings (environment): MODELS (comma-separated zoo names, default the whole zoo), TARGET (default
# `cuda`, i.e. sm_80 PTX, which newer GPUs compile when they load it; `cuda:sm_89` and the like pick
# another architecture; IREE 3.13 cannot compile sm_90), ROUNDS (benchmark rounds, default 5),
# OUT_DIR (default gpu-check-out, or $OUT when that is set). DEVICE=vulkan TARGET=vulkan (or
# DEVICE=local-sync TARGET=llvm-cpu) runs the same steps elsewhere, e.g. to try the script out on a
# machine without an NVIDIA GPU. Exits non-zero when a model fails to
# export, a bundle's output differs from PyTorch's, or a decision was not driven both ways.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT_DIR=${OUT_DIR:-${OUT:-gpu-check-out}}
TARGET=${TARGET:-cuda}
DEVICE=${DEVICE:-cuda}
ROUNDS=${ROUNDS:-5}
MODELS=${MODELS:-}
mkdir -p "$OUT_DIR"
exec > >(tee "$OUT_DIR/gpu_check.log") 2>&1
started=$(date +%s)
step() { echo "== [$(($(date +%s) - started)) s] $*"; }

step "machine"
if [ "$DEVICE" = cuda ] && { ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L; }; then
    echo "no NVIDIA GPU here (nvidia-smi finds none): this check needs one" >&2
    exit 2
fi

step "setup (.venv; torch==2.13.0 from PyPI is its CUDA build on Linux x86-64)"
make setup >"$OUT_DIR/setup.log" 2>&1 || { tail -20 "$OUT_DIR/setup.log"; exit 1; }
PY=.venv/bin/python
DEVICE="$DEVICE" $PY - <<'EOF'
import os

import iree.runtime as ireert
import torch

print(f"torch {torch.__version__}, CUDA available to PyTorch: {torch.cuda.is_available()}")
if torch.cuda.is_available():
    print(f"PyTorch sees {torch.cuda.get_device_name()}")
driver = os.environ["DEVICE"]
devices = ireert.get_driver(driver).query_available_devices()
print(f"IREE {driver} devices: {devices}")
if not devices:
    raise SystemExit(f"IREE's {driver} driver finds no device")
EOF

step "export the zoo for $TARGET, then verify each bundle on IREE's $DEVICE driver with both hosts"
# One process: each model is built and scripted once for the export and the reference outputs.
MODELS="$MODELS" TARGET="$TARGET" DEVICE="$DEVICE" OUT_DIR="$OUT_DIR" $PY - <<'EOF'
import copy
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

import dycl_iree
import host_runtime
from dycl_iree.compile import cuda_architecture_of
from dycl_iree.verify import compare
from models import ZOO

warnings.filterwarnings("ignore")
names = [n for n in os.environ["MODELS"].split(",") if n] or sorted(ZOO)
target, device, out = os.environ["TARGET"], os.environ["DEVICE"], Path(os.environ["OUT_DIR"])
rows, failures = [], []


def numpy_inputs(sample):
    return tuple(v.numpy() if isinstance(v, torch.Tensor) else v for v in sample)


for name in names:
    row = {"model": name}
    rows.append(row)
    try:
        model, example = ZOO[name].build()
        model = model.eval()
        start = time.perf_counter()
        bundle = dycl_iree.export(model, example, targets=(target,))
        path = bundle.save(out / "bundles" / f"{name}.dycl")  # replaces the bundle of an earlier run
        row["export_s"] = round(time.perf_counter() - start, 1)
        (entry,) = bundle.manifest["targets"].values()
        row["architecture"] = cuda_architecture_of(entry["flags"])
        row["host"] = bundle.host
    except Exception as error:
        row["error"] = f"export: {error}"
        failures.append(name)
        print(f"{name}: export FAILED: {error}", flush=True)
        continue
    scripted = torch.jit.script(model)
    in_float64 = copy.deepcopy(model).double()
    samples = ZOO[name].samples()
    hosts = ["python"] + (["compiled"] if bundle.host == "compiled" else [])
    for host in hosts:
        try:
            runner = host_runtime.load(path, device=device, host=host, record=host == "python")
            errors, mismatched, call_s = [], 0, []
            for sample in samples:
                with torch.no_grad():
                    expected = scripted(*sample)
                inputs = numpy_inputs(sample)
                start = time.perf_counter()
                actual = runner(*inputs)
                call_s.append(time.perf_counter() - start)
                widened = tuple(v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in sample)
                with torch.no_grad():
                    if not compare(actual, expected, errors, exact=lambda: in_float64(*widened)):
                        mismatched += 1
            row[host] = {
                "read_back": runner.read_back,
                "mismatched": f"{mismatched}/{len(samples)}",
                "max_rel_error": max((e.max_rel for e in errors), default=0.0),
                "median_call_ms": round(1e3 * float(np.median(call_s[1:] or call_s)), 3),
            }
            if mismatched:
                failures.append(f"{name} ({host} host)")
            if host == "python":
                uncovered = [
                    d["label"] for d in runner.manifest["decisions"]
                    if d["kind"] == "if" and set(runner.decisions.get(d["label"], {})) != {True, False}
                ]
                row["uncovered"] = uncovered
                if uncovered:
                    failures.append(f"{name} (decisions not driven both ways: {uncovered})")
        except Exception as error:
            row[host] = {"error": str(error)}
            failures.append(f"{name} ({host} host)")
    print(json.dumps(row), flush=True)

(out / "verify.json").write_text(json.dumps(rows, indent=1))
print(f"verified {len(names)} models on {device}; failures: {failures or 'none'}")
sys.exit(1 if failures else 0)
EOF

step "benchmark: eager against dycl_iree on IREE's $DEVICE driver"
bench_models=()
[ -n "$MODELS" ] && bench_models=(--models "$MODELS")
case "$DEVICE" in cuda | vulkan) bench_device=$DEVICE ;; *) bench_device=cpu ;; esac
$PY -m dycl_iree bench --device "$bench_device" --rounds "$ROUNDS" "${bench_models[@]}" --out "$OUT_DIR/bench" >"$OUT_DIR/bench.md"
sed -n '/^## Geometric mean/,$p' "$OUT_DIR/bench.md"

step "done: $OUT_DIR/verify.json, $OUT_DIR/bench.md, $OUT_DIR/gpu_check.log"
