"""host_runtime runs a bundle where importing torch fails (an edge device without PyTorch)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from .conftest import NO_TORCH_GUARD, flatten, run_without_torch

_RUNNER = NO_TORCH_GUARD + textwrap.dedent(
    """    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("the torch import guard does not work")

    import numpy as np
    import host_runtime

    bundle, inputs_file, outputs_file, host = sys.argv[1:5]
    data = np.load(inputs_file)
    run = host_runtime.load(bundle, host=host)
    out = run(data["x"], int(data["n"]))
    np.savez(outputs_file, y=out[0], steps=np.array(out[1]))
    assert "torch" not in sys.modules
    print("ok", host)
    """
)


def test_bundle_runs_with_numpy_and_iree_runtime_only(exported, tmp_path: Path) -> None:
    item = exported("for_break")
    script = tmp_path / "run_without_torch.py"
    script.write_text(_RUNNER)
    for index, sample in enumerate(item.samples()):
        x, n = sample
        inputs = tmp_path / f"in{index}.npz"
        np.savez(inputs, x=x.numpy(), n=np.array(n))
        expected = flatten(item.reference(*sample))
        for host in ("compiled", "python"):
            outputs = tmp_path / f"out{index}{host}.npz"
            run_without_torch(script, str(item.path), str(inputs), str(outputs), host)
            got = np.load(outputs)
            np.testing.assert_allclose(got["y"], expected[0].numpy(), rtol=1e-5, atol=1e-6)
            assert int(got["steps"]) == expected[1]
