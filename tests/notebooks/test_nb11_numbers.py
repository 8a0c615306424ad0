"""Notebook 11's prose quotes numbers its cells compute — slopes, (T, F) tensors kept, GiB, FLOPs, passes over
memory: each is held here to the notebook's own definitions, so an edit of a cell that changes a number fails until
the prose is changed with it. Where a cell runs the student's code, the test runs it with autograd's answer."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from course.peak_memory import backward_peak

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "11_mlp_and_rope.py"
CELLS = ("def rope_angles", "def tensor_bytes", "GELU_X = ", "D_CPU, F_CPU = ", "LLAMA_D, LLAMA_F",
         "def autograd_swiglu_backward")  # the cells whose definitions the numbers come from, each by a line it holds
F64 = torch.float64


def prose() -> str:
    """The notebook's markdown, with the comment marks and line breaks taken out."""
    cells = re.split(r"(?m)^# %%(.*)$", NOTEBOOK.read_text())[1:]
    text = " ".join(body for marker, body in zip(cells[::2], cells[1::2]) if "[markdown]" in marker)
    return " ".join(line.removeprefix("#").strip() for line in text.splitlines())


def reference_swiglu_backward(a, b, dh):
    """(ā, b̄) by autograd: the student's swiglu_backward, where a cell calls it."""
    with torch.enable_grad():  # a Function's backward runs without grad
        a, b = (t.detach().requires_grad_(True) for t in (a, b))
        return torch.autograd.grad(F.silu(a) * b, (a, b), dh)


@pytest.fixture(scope="module")
def nb() -> dict:
    """The imports, plain functions, classes and assignments of CELLS, run in order on the CPU; no picture is
    drawn, no kernel runs, no student code is called."""
    cells = re.split(r"(?m)^# %%.*$", NOTEBOOK.read_text())
    ns: dict = {"DEVICE": "cpu", "swiglu_backward": reference_swiglu_backward}
    for key in CELLS:
        cell = next(c for c in cells if key in c)
        for node in ast.parse(cell).body:
            source = ast.get_source_segment(cell, node)
            plain = isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign, ast.ClassDef)) or (
                isinstance(node, ast.FunctionDef) and not node.decorator_list)
            if plain and "plt" not in source and "course." not in source:
                exec(compile(ast.Module([node], []), str(NOTEBOOK), "exec"), ns)
    return ns


def gelu_slopes(x):
    """gelu'(x), exact and tanh, by autograd."""
    x = x.detach().requires_grad_(True)
    return [torch.autograd.grad(F.gelu(x, approximate=form).sum(), x)[0] for form in ("none", "tanh")]


def test_the_gelu_gap(nb):
    x = nb["GELU_X"]
    exact, tanh = gelu_slopes(x)
    gap = tanh - exact
    worst = gap.abs().argmax()
    assert (f"{gap.abs().max():.1e}", f"{abs(x[worst]):.2f}") == ("8.7e-04", "2.02")
    assert torch.allclose(gap, -gap.flip(0), atol=1e-15)  # "the difference is odd"
    assert gap[x.abs() >= 5].abs().max() < 1e-5  # "past |x| = 5 they agree to better than 10⁻⁵"
    assert round(2**-7 / gap.abs().max().item()) == 9  # "a ninth of bfloat16's spacing near 1"
    forward_gap = (F.gelu(x) - F.gelu(x, approximate="tanh")).abs().max()
    assert forward_gap < 5e-4  # "the two forwards differ by less than 5 · 10⁻⁴"
    text = prose()
    assert "The slopes differ by at most $8.7 \\cdot 10^{-4}$, at $x = \\pm 2.02$" in text
    assert "$8.7 \\cdot 10^{-4}$, at $x = \\pm 2.02$: small" in text  # what to take away
    assert "differ by less than $5 \\cdot 10^{-4}$" in text
    assert len(x) == 12_001 and "on 12,001 points of $[-6, 6]$" in text


def test_the_numbers_worked_by_hand():
    one = torch.ones(1, dtype=F64)
    exact, tanh = gelu_slopes(one)
    assert (f"{exact.item():.4f}", f"{tanh.item():.4f}") == ("1.0833", "1.0830")  # GELU's hint 3
    cdf, pdf = 0.5 * (1 + math.erf(1 / math.sqrt(2))), math.exp(-0.5) / math.sqrt(2 * math.pi)
    assert (f"{cdf:.4f}", f"{pdf:.4f}") == ("0.8413", "0.2420")
    s = torch.sigmoid(one).item()
    da, db = reference_swiglu_backward(one, one, one)  # a = b = h̄ = 1
    assert (f"{s:.4f}", f"{da.item():.4f}", f"{db.item():.4f}", f"{s * (1 - s):.4f}") == (
        "0.7311", "0.9277", "0.7311", "0.1966")  # SwiGLU's hint 3
    a = torch.linspace(-3, 0, 30_001, dtype=F64)
    lowest = F.silu(a).argmin()
    assert (f"{F.silu(a)[lowest]:.3f}", f"{a[lowest]:.2f}") == ("-0.278", "-1.28")  # SiLU's dip (recap B, Part C)
    text = prose()
    for quoted in ("$1.0833$; the tanh form gives $1.0830$", "$\\varphi(1) = e^{-1/2} / \\sqrt{2\\pi} = 0.2420$",
                   "$\\operatorname{silu}'(1) = 0.7311 \\cdot (1 + 1 \\cdot 0.2689) = 0.9277$",
                   "If your $\\bar a$ is $0.1966$", "$-0.278$ near $a = -1.28$"):
        assert quoted in text, quoted


def test_what_each_way_keeps(nb):
    gen = torch.Generator().manual_seed(0)
    d, f = 8, 28
    Wg, Wu = (torch.randn(d, f, generator=gen) for _ in range(2))
    Wd = torch.randn(f, d, generator=gen)
    x, dy = (torch.randn(32, d, generator=gen) for _ in range(2))
    kept = {name: backward_peak(fn, x, Wg, Wu, Wd, grad=dy)["saved"] / (32 * f * 4)
            for name, fn in nb["WAYS"].items()}
    assert kept == {name: tensors for name, (tensors, _) in nb["KEPT"].items()}  # the table the GiB come from
    assert list(kept.values()) == [4, 2, 1, 0]
    assert (nb["D_CPU"], nb["F_CPU"], nb["T_SIZES"][0], nb["T_SIZES"][-1]) == (128, 448, 256, 2048)
    assert nb["F_CPU"] / nb["D_CPU"] == 14_336 / 4096 == 3.5 and 4096 / nb["D_CPU"] == 32
    assert "$d = 128$ and $F = 448$ — Llama-3-8B's ratio $F/d = 3.5$ at a thirty-second of its width" in prose()
    assert "$T$ = 256 to 2,048" in prose()
    assert "autograd keeps 4 tensors of $(T, F)$, saving $a$ and $b$ keeps 2, saving $h$ keeps 1" in prose()


def test_the_llama_numbers(nb):
    assert f"{nb['TF_GIB']:.1f}" == "7.0"
    gib = {name: tensors * nb["TF_GIB"] for name, (tensors, _) in nb["KEPT"].items()}
    assert [f"{v:.1f}" for v in gib.values()] == ["28.0", "14.0", "7.0", "0.0"]
    weights_gib = 8.03e9 * 2 / 2**30  # Llama-3-8B's parameters in bfloat16
    assert gib["PyTorch autograd"] > weights_gib and f"{weights_gib:.0f}" == "15"
    share = 2 / nb["TRAIN_GEMMS"]
    extra = 2 * nb["GEMM"] * nb["LLAMA_LAYERS"] / 1e12
    assert (f"{share:.0%}", f"{extra:.1f}") == ("22%", "61.6")
    text = prose()
    for quoted in ("is 7.0 GiB, so autograd keeps 28.0 GiB", "more than the model's 15 GiB",
                   "halves it to 14.0 GiB", "22% more MLP FLOPs (61.6 TFLOP per sequence here)",
                   "(14.0 GiB instead of 28.0 for Llama-3-8B", "for 22% more MLP FLOPs"):
        assert quoted in text, quoted


def test_the_traffic_numbers(nb):
    passes = {name: sum(r + w for _, r, w in ops) / nb["one"] for name, ops in nb["passes"].items()}
    assert passes == {"PyTorch autograd": 9, "one fused kernel": 5}  # no student code: their row is left out
    assert [op for op, _, _ in nb["passes"]["PyTorch autograd"]] == ["mul", "mul", "silu_backward"]
    gb = nb["tf_bytes"] / 1e9
    assert (f"{gb:.2f}", f"{5 * gb:.2f}", f"{5 * nb['tf_bytes'] / nb['H100_BYTES_PER_S'] * 1e3:.2f}",
            f"{9 * gb:.2f}") == ("0.23", "1.17", "0.35", "2.11")
    text = prose()
    for quoted in ("9 passes, against the fused kernel's 5", "a $(T, F)$ bfloat16 tensor is 0.23 GB",
                   "moves 1.17 GB per layer — 0.35 ms at an H100's 3.35 TB/s — and autograd 2.11 GB",
                   "5 passes against autograd's 9"):
        assert quoted in text, quoted


def test_the_rope_numbers(nb):
    cos, sin = nb["rope_angles"](2, 128)
    last_rate = math.atan2(sin[1, -1].item(), cos[1, -1].item())  # radians per token of the last pair
    assert 53_000 < 2 * math.pi / last_rate < 55_000  # "one every 54,000 tokens or so"
    x = torch.randn(2, 3, 37, 40, requires_grad=True)
    cos, sin = nb["rope_angles"](37, 40, dtype=torch.float32)
    y = nb["rope_forward"](x, cos, sin)
    with nb["Traffic"]() as traffic:
        torch.autograd.grad(y, x, torch.ones_like(y))
    moved = sum(r + w for _, r, w in traffic.ops) / (x.numel() * 4)
    assert 10 <= len(traffic.ops) <= 13 and moved > 8  # "a dozen small ops", "many times what the kernel moves"
    text = prose()
    assert "one every 54,000 tokens or so" in text and "runs a dozen small ops" in text
