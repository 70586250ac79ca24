"""Data-parallel updates: 2 gloo processes under torchrun give the gradients and the
updated weights of the one-process update on the same batch (events sharded whole)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "ddp_update.py"
LR = 1e-3


def _run(args, tmp_path, nproc: int = 1):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    if nproc > 1:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
                   str(nproc), "--master_addr", "127.0.0.1", "--master_port", str(port),
                   str(SCRIPT), *args]
    else:
        command = [sys.executable, str(SCRIPT), *args]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    _run(["prepare", "--out", str(root / "data"), "--tasks", "6", "--group", "3"], root)
    return root


def _load(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "result.safetensors"))


@pytest.mark.parametrize("minibatch", ["0", "8"])
def test_two_gloo_ranks_equal_one_process(data, minibatch):
    for name, nproc in (("one", 1), ("two", 2)):
        _run(["update", "--data", str(data / "data"), "--out", str(data / f"{name}{minibatch}"),
              "--minibatch-units", minibatch, "--microbatch-rows", "4"], data, nproc)
    one, two = _load(data / f"one{minibatch}"), _load(data / f"two{minibatch}")
    assert set(one) == set(two)
    grads = [k for k in one if k.startswith("grad/")]
    assert grads and max(float(one[k].abs().max()) for k in grads) > 1e-3  # not vacuous
    for key in grads:
        torch.testing.assert_close(two[key], one[key], rtol=1e-3, atol=1e-5)
    if minibatch == "0":
        # One AdamW step moves each weight by about lr * sign(grad): where the gradient is
        # clearly non-zero the two runs agree to rounding; a gradient within rounding of
        # zero can flip its sign, a difference of at most 2 * lr.
        for key in [k for k in one if k.startswith("weight/")]:
            grad = one["grad/" + key.removeprefix("weight/")]
            clear = grad.abs() > 1e-4
            torch.testing.assert_close(two[key][clear], one[key][clear], rtol=0, atol=1e-6)
            assert float((two[key] - one[key]).abs().max()) <= 2 * LR + 1e-6
