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


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU memory path")
def test_attention_memory_on_cpu_grows_linearly_for_recompute():
    done = subprocess.run([sys.executable, "-m", "kernels.bench", "attention", "--memory", "--cols", "128", "256"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    slope_line = next(line for line in done.stdout.splitlines() if line.startswith("log-log slope"))
    recompute_slope = float(slope_line.rsplit("recompute", 1)[1])
    assert recompute_slope < 1.1, done.stdout
