import subprocess
import sys

import pytest
import torch


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
@pytest.mark.parametrize("op", ["softmax", "cross_entropy", "layer_norm", "rms_norm", "attention", "fused_linear_cross_entropy",
                                "linear", "cross_entropy_options", "attention --llama3-8b", "swiglu", "rope"])
def test_bench_without_cuda_says_so_and_exits_0(op):
    done = subprocess.run([sys.executable, "-m", "kernels.bench", *op.split()], capture_output=True, text=True)
    assert done.returncode == 0 and "no CUDA device" in done.stdout


def test_bench_refuses_an_unknown_op():
    done = subprocess.run([sys.executable, "-m", "kernels.bench", "nope"], capture_output=True, text=True)
    assert done.returncode == 2 and "invalid choice" in done.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bench_measures_on_gpu():
    from kernels.bench import run

    rows = run("softmax", ["float32"], rows=256, cols=[1024])
    assert rows[0]["triton_fwdbwd_GBps"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("op, cols", [("swiglu", 1000), ("rope", 384)])  # F off a block; 3 heads of 128
def test_elementwise_bench_measures_against_eager_and_compile_on_gpu(op, cols):
    from kernels.bench import run

    row = run(op, ["bfloat16"], rows=257, cols=[cols])[0]
    for label in ("triton", "eager", "compile"):
        assert row[f"{label}_fwd_GBps"] > 0 and row[f"{label}_fwdbwd_GBps"] > 0, row


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_linear_bench_measures_every_gemm_on_gpu():
    from kernels.bench import run_linear

    row = run_linear(256, 128, 192, ["bfloat16"])[0]
    for name in ("y", "dx", "dw_splitk", "dw_atomic"):
        assert row[f"{name}_TFLOPs"] > 0 and row[f"{name}_torch_TFLOPs"] > 0, row


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU memory path")
def test_attention_memory_on_cpu_grows_linearly_for_recompute():
    done = subprocess.run([sys.executable, "-m", "kernels.bench", "attention", "--memory", "--cols", "128", "256"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    slope_line = next(line for line in done.stdout.splitlines() if line.startswith("log-log slope"))
    recompute_slope = float(slope_line.rsplit("recompute", 1)[1])
    assert recompute_slope < 1.1, done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU memory path")
def test_lm_head_memory_on_cpu_prints_the_three_columns_and_the_verdict():
    done = subprocess.run([sys.executable, "-m", "kernels.bench", "fused_linear_cross_entropy", "--memory",
                           "--rows", "256", "--cols", "2048", "--dim", "16"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    rows = {line[:24].strip(): line[24:].split() for line in lines if line.startswith(("fused", "unfused"))}
    compiled = any(line.startswith("torch.compile: compiled") for line in lines)
    skipped = any(line.startswith("torch.compile does not work on this CPU") for line in lines)
    assert compiled != skipped, done.stdout
    assert sorted(rows) == sorted(["fused (kernels)", "unfused eager"] + (["unfused torch.compile"] if compiled else [])), rows
    fused_mib, eager_mib = float(rows["fused (kernels)"][0]), float(rows["unfused eager"][0])
    # T×V = 2 MiB of float32 logits: eager keeps them and builds their gradient; fused keeps h̄ and W̄ (0.3 MiB).
    assert eager_mib >= 4.0 and eager_mib / fused_mib >= 10, done.stdout
    assert all(float(cells[2]) < 1e-5 for cells in rows.values()), done.stdout  # each agrees with eager
    assert lines[-1].startswith("ok: the fused op needs"), done.stdout


def test_cpu_peak_bytes_counts_what_the_dispatch_mode_counts():
    """The profiler's allocator events and course's PeakMemory agree on eager torch, where both see everything."""
    from course.peak_memory import PeakMemory
    from kernels.bench import cpu_peak_bytes

    x = torch.randn(300, 200)

    def step():
        y = x @ x.T  # 360,000 bytes, freed before z's peak
        z = torch.cat([y, y]).sum(0)
        del y
        return z

    peak, _ = cpu_peak_bytes(step)
    with PeakMemory() as mem:
        step()
    assert peak == mem.peak >= 3 * 300 * 300 * 4, (peak, mem.peak)
