"""Visible check for 08_mixed_precision_backward, Part E: ``softmax_bwd_mixed_kernel``, the softmax backward as a
Triton kernel that loads half-precision rows, accumulates in float32 and stores half precision.

The kernel is launched as ``softmax_bwd_mixed_kernel[(rows,)](dy, y, dx, dy.stride(0), y.stride(0), dx.stride(0),
n_cols, BLOCK=BLOCK)``: one program per row, which it walks BLOCK columns at a time (BLOCK is smaller than the row
here, so the walk takes several steps). Rows sit inside wider buffers: the inputs' padding holds NaN, the output's
a sentinel that must stay. The reference is torch's own backward kernel in float64 from the same rounded values,
and x̄ is held to a small multiple of the error torch's own float32 backward makes on the same values, stored in the
rows' dtype (``mixed_precision.measured_bound``; the hidden check holds it to notebook 08 Part C's rule instead).

float16 runs in Triton's interpreter; bfloat16 does not (numpy has no bfloat16), so the bfloat16 cases run only
where there is a GPU. A float16 row far outside the bound whose float32 copy is right is ``half-accumulation``, with
the shortest row that shows it. Last, a float64 gradcheck through the kernel: float64 inputs accumulate in float64
(the upcast path), and the VJP the kernel writes must be the derivative of ⟨softmax(x), ȳ⟩.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..diagnose import GradingFailure, randn, relative_error, seeded
from ..gradcheck import directional_derivative
from ..kernel_spec import Float32Only, Gradcheck, KernelSpec, Launch, Wrong, launch_rows
from ..spec import visible
from ..triton_check import device
from .mixed_precision import (
    BF16,
    F16,
    F32,
    F64,
    HALF,
    OFFSET,
    ROW_SWEEP,
    measured_bound,
    name_of,
)
from .triton_softmax import backward_alternatives

NAME = "softmax_bwd_mixed_kernel"
SEED = 20240809


@dataclass(frozen=True)
class KernelCase:
    """One launch: y and ȳ as float64 values already rounded to ``dtype``, the block width, the label."""

    label: str
    y: torch.Tensor
    dy: torch.Tensor
    dtype: torch.dtype
    block: int

    @property
    def expected(self) -> torch.Tensor:
        return torch._softmax_backward_data(self.dy, self.y, -1, F64)  # torch's own, from these values


# What x̄ of a case may be off by, stored in a dtype: (case, dtype) -> relative error.
KernelRule = Callable[[KernelCase, torch.dtype], float]


def measured(case: KernelCase, dtype: torch.dtype) -> float:
    """The visible check's rule: a margin times the error of torch's own backward in float32 on the same values."""
    acc = F64 if dtype == F64 else F32
    right = torch._softmax_backward_data(case.dy.to(acc), case.y.to(acc), -1, acc)
    return measured_bound(case.expected, right, dtype)


def kernel_case(gen: torch.Generator, label: str, rows: int, n: int, dtype: torch.dtype, block: int,
                offset: float = 0.0) -> KernelCase:
    """y the softmax of logits of spread 2 and ȳ = offset + N(0, 1), both rounded to ``dtype``."""
    y = torch.softmax(2 * randn(gen, rows, n), dim=-1).to(dtype).to(F64)
    dy = (offset + randn(gen, rows, n)).to(dtype).to(F64)
    note = f", dy = {offset:g} + N(0, 1)" if offset else ""
    return KernelCase(f"{label}: y and dy ({rows}, {n}) {name_of(dtype)}{note}, BLOCK = {block}", y, dy, dtype, block)


def launch_case(kernel, case: KernelCase, fill: float = math.nan, dtype: torch.dtype | None = None,
                y: torch.Tensor | None = None) -> Launch:
    """Launch on the case's rows (in ``dtype`` when given; with ``y`` for the case's y), padded with ``fill``."""
    y = case.y if y is None else y
    dx, wrote, touched, _ = launch_rows(NAME, kernel, {"DY_ptr": case.dy, "Y_ptr": y}, dtype=dtype or case.dtype,
                                        block=case.block, width=y.shape[1], fill=fill)
    return Launch({"dx": dx}, touched, ["padding"] if wrote else [], case.label)


def _error(kernel, case: KernelCase, dtype: torch.dtype | None = None) -> float:
    return relative_error(launch_case(kernel, case, dtype=dtype).got["dx"], case.expected)


def shortest_row(kernel, failed: KernelCase, gen: torch.Generator,
                 rule: KernelRule = measured) -> tuple[int, float, float] | None:
    """(n, error, bound) at the shortest row of ROW_SWEEP, shorter than the ``failed`` case's, that the kernel gets
    wrong in its dtype; None when no shorter row shows it."""
    for n in (n for n in ROW_SWEEP if n < failed.y.shape[1]):
        case = kernel_case(gen, "sweep", 8, n, failed.dtype, min(128, n // 2), OFFSET)
        err, limit = _error(kernel, case), rule(case, case.dtype)
        if not err <= limit:
            return n, err, limit
    return None


@dataclass(frozen=True)
class HalfAccumulation:
    """Close to right in half precision reads as a small constant factor or as nothing in particular: the float32
    copy tells whether the precision is the bug (the hub accumulated in the loaded dtype)."""

    rule: KernelRule

    def __call__(self, wrong: Wrong) -> GradingFailure | None:
        case, limit = wrong.case, wrong.tol
        if wrong.failure.cls not in ("wrong-values", "scale") or case.dtype not in HALF or not wrong.finite:
            return None
        if not _error(wrong.kernel, case, F32) <= self.rule(case, F32):
            return None
        n, err, half = case.y.shape[1], relative_error(wrong.got, case.expected), name_of(case.dtype)
        n_short, e, b = shortest_row(wrong.kernel, case, seeded(SEED + 1), self.rule) or (n, err, limit)
        return GradingFailure(
            "half-accumulation", f"dx is right with the same values in float32, but in {half} it is off by {err:.1e} — "
            f"{err / limit:.0f}× the bound {limit:.1e} for rows of {n}: the row's hub s is accumulated in {half} — "
            "tl.sum adds in the dtype it is given, and so does an accumulator of the loaded dtype. The shortest row "
            f"that shows it: n_cols = {n_short} (off by {e:.1e}, {e / b:.0f}× the bound).", wrong.failure.where)


def gradcheck(kernel, case: KernelCase, eps: float = 1e-6) -> bool:
    """Fast-mode gradcheck in float64: the derivative of ⟨softmax(x), ȳ⟩ along a random u (``course.gradcheck``'s
    stencil), against ⟨dx, u⟩ with dx the kernel's VJP at y = softmax(x)."""
    gen = seeded(SEED)
    x = randn(gen, *case.y.shape)
    u = randn(gen, *case.y.shape)
    dx = launch_case(kernel, case, dtype=F64, y=torch.softmax(x, -1)).got["dx"]
    numeric = directional_derivative(lambda z: (torch.softmax(z, -1) * case.dy).sum(), x, u, eps)
    exact = float((dx * u).sum())
    return abs(numeric - exact) <= 1e-7 + 1e-5 * abs(exact)


def _past_end(spec: KernelSpec, case: KernelCase, run: Launch) -> tuple[str, str]:
    return (f"{NAME} writes past the end of a row: the columns after each row of n_cols = {case.y.shape[1]} changed; "
            "the last block of a row is wider than what is left of it, and its store needs the mask too.", "")


def spec(rule: KernelRule = measured) -> KernelSpec:
    """The kernel's spec, x̄ held to ``rule``: the visible check's measured bound, or the hidden check's Part C."""
    return KernelSpec(
        name=NAME, launch=launch_case, reference=lambda case: {"dx": case.expected},
        alternatives=lambda case: {"dx": backward_alternatives(case.y, case.dy)},
        tol=lambda case: rule(case, case.dtype), read_only="inputs are read-only; store dx through DX_ptr.",
        past_end=_past_end, refinements=(HalfAccumulation(rule), Float32Only(
            "is right only to about float32 precision for float64 rows: the accumulator must be float64 when the inputs "
            "are (the float64 gradcheck needs it) — the wider of float32 and the loaded dtype.", classes=None,
            topic="float32", generic=True)),
        gradcheck=gradcheck, gradcheck_fails="the dx it writes is not the derivative of ⟨softmax(x), ȳ⟩, though it "
        "matched the reference.")


def runnable(cases: Sequence[KernelCase], tiny: KernelCase) -> list:
    """The cases this device can run (bfloat16 needs a GPU), then the float64 gradcheck on ``tiny``."""
    on_gpu = device().type == "cuda"
    return [*(case for case in cases if case.dtype != BF16 or on_gpu), Gradcheck(tiny, tiny.label)]


def check_mixed_kernel(kernel, cases: Sequence[KernelCase], tiny: KernelCase, rule: KernelRule = measured) -> None:
    spec(rule).check(kernel, runnable(cases, tiny))


def visible_cases() -> tuple[list[KernelCase], KernelCase]:
    gen = seeded(SEED)
    cases = [
        kernel_case(gen, "batch 1", 1, 5, F32, 4),  # two blocks, the second with one column
        kernel_case(gen, "batch 4", 4, 37, F32, 16),  # three blocks, rows far apart in memory
        kernel_case(gen, "float64", 3, 50, F64, 16),
        kernel_case(gen, "float16", 3, 100, F16, 32, OFFSET),
        kernel_case(gen, "float16, long rows", 2, 1000, F16, 128, OFFSET),
        kernel_case(gen, "bfloat16 (GPU only)", 2, 1000, BF16, 128, OFFSET),
    ]
    return cases, kernel_case(gen, "gradcheck", 2, 12, F64, 4)


GPU = " and bfloat16" if device().type == "cuda" else " (bfloat16 needs a GPU)"
softmax_bwd_mixed_kernel = visible(spec(), lambda: runnable(*visible_cases()), (
    f"rows walked in blocks inside NaN-padded buffers, float32, float64 and float16{GPU} within 2× the error of float32 "
    "accumulation on the same values, ȳ far from zero, a float64 gradcheck"))
