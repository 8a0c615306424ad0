import subprocess
import sys

import pytest
import torch


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
@pytest.mark.parametrize("op", ["softmax", "cross_entropy", "layer_norm", "rms_norm", "attention"])
def test_bench_without_cuda_says_so_and_exits_0(op):
    done = subprocess.run([sys.executable, "-m", "kernels.bench", op], capture_output=True, text=True)
    assert done.returncode == 0 and "no CUDA device" in done.stdout


def test_bench_refuses_an_unknown_op():
    done = subprocess.run([sys.executable, "-m", "kernels.bench", "nope"], capture_output=True, text=True)
    assert done.returncode == 2 and "invalid choice" in done.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bench_measures_on_gpu():
    from kernels.bench import run

    rows = run("softmax", ["float32"], rows=256, cols=[1024])
    assert rows[0]["triton_fwdbwd_GBps"] > 0
