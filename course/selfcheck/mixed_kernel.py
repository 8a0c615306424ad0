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

from ..diagnose import GradingFailure, diagnose, graded, randn, relative_error, seeded
from ..gradcheck import directional_derivative
from ..triton_check import device, launch, require_kernel
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
SENTINEL = -12345.0


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


def run_kernel(kernel, case: KernelCase, dtype: torch.dtype | None = None,
               y: torch.Tensor | None = None) -> tuple[torch.Tensor, bool, list[str]]:
    """Launch on the case (in ``dtype`` when given; with ``y`` for the case's y). Return dx in float64 on the CPU,
    whether the output's padding changed, and the inputs it wrote into."""
    dtype = dtype or case.dtype
    y = case.y if y is None else y
    rows, n = y.shape
    dev = device()
    bufs = {}
    for k, (ptr, values) in enumerate((("DY_ptr", case.dy), ("Y_ptr", y))):
        buf = torch.full((rows, n + 3 + 2 * k), math.nan, dtype=dtype, device=dev)  # odd, different strides
        buf[:, :n] = values.to(dev, dtype)
        bufs[ptr] = buf
    out = torch.full((rows, n + 2), SENTINEL, dtype=dtype, device=dev)
    dy_v, y_v, dx_v = bufs["DY_ptr"][:, :n], bufs["Y_ptr"][:, :n], out[:, :n]
    touched = launch(NAME, lambda: kernel[(rows,)](dy_v, y_v, dx_v, dy_v.stride(0), y_v.stride(0), dx_v.stride(0), n,
                                                   BLOCK=case.block), bufs)
    return dx_v.to("cpu", F64), bool((out[:, n:] != SENTINEL).any()), touched


def _error(kernel, case: KernelCase, dtype: torch.dtype | None = None) -> float:
    return relative_error(run_kernel(kernel, case, dtype)[0], case.expected)


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


def check_case(kernel, case: KernelCase, rule: KernelRule = measured) -> None:
    """One launch: the inputs untouched, the values within the bound (named when they are not), the padding kept."""
    got, wrote_padding, touched = run_kernel(kernel, case)
    if touched:
        raise GradingFailure("wrong-values", f"{NAME} wrote into its input {', '.join(touched)}: inputs are "
                             "read-only; store dx through DX_ptr.", f"inputs: {case.label}")
    rows, n = case.y.shape
    limit = rule(case, case.dtype)
    failure = diagnose("dx", got, case.expected, tol=limit, case=case.label,
                       alternatives=backward_alternatives(case.y, case.dy))
    if failure is not None:
        # Close to right in half precision reads as a small constant factor or as nothing in particular: the
        # float32 copy tells whether the precision is the bug.
        if failure.cls in ("wrong-values", "scale") and case.dtype in HALF and bool(torch.isfinite(got).all()):
            in_f32 = _error(kernel, case, F32)
            if in_f32 <= rule(case, F32):
                err = relative_error(got, case.expected)
                sentence = (f"dx is right with the same values in float32, but in {name_of(case.dtype)} it is off by "
                            f"{err:.1e} — {err / limit:.0f}× the bound {limit:.1e} for rows of {n}: the row's hub "
                            f"s is accumulated in {name_of(case.dtype)} — tl.sum adds in the dtype it is "
                            "given, and so does an accumulator of the loaded dtype.")
                n_short, e, b = shortest_row(kernel, case, seeded(SEED + 1), rule) or (n, err, limit)
                sentence += f" The shortest row that shows it: n_cols = {n_short} (off by {e:.1e}, {e / b:.0f}× the bound)."
                raise GradingFailure("half-accumulation", sentence, failure.where)
        if case.dtype == F64 and failure.generic and relative_error(got, case.expected) < 1e-5:
            raise GradingFailure("wrong-values", "dx is right only to about float32 precision for float64 rows: the "
                                 "accumulator must be float64 when the inputs are (the float64 gradcheck needs it) — "
                                 "the wider of float32 and the loaded dtype.", failure.where, "float32")
        raise failure
    if wrote_padding:
        raise GradingFailure("wrong-values", f"{NAME} writes past the end of a row: the columns after each row of "
                             f"n_cols = {n} changed; the last block of a row is wider than what is left of it, and its "
                             "store needs the mask too.", f"inputs: {case.label}")


def gradcheck(kernel, case: KernelCase, eps: float = 1e-6) -> bool:
    """Fast-mode gradcheck in float64: the derivative of ⟨softmax(x), ȳ⟩ along a random u (``course.gradcheck``'s
    stencil), against ⟨dx, u⟩ with dx the kernel's VJP at y = softmax(x)."""
    gen = seeded(SEED)
    x = randn(gen, *case.y.shape)
    u = randn(gen, *case.y.shape)
    dx = run_kernel(kernel, case, F64, torch.softmax(x, -1))[0]
    numeric = directional_derivative(lambda z: (torch.softmax(z, -1) * case.dy).sum(), x, u, eps)
    exact = float((dx * u).sum())
    return abs(numeric - exact) <= 1e-7 + 1e-5 * abs(exact)


def check_mixed_kernel(kernel, cases: Sequence[KernelCase], tiny: KernelCase, rule: KernelRule = measured) -> None:
    """Every case that this device can run (bfloat16 needs a GPU), then the gradcheck on ``tiny``."""
    require_kernel(NAME, kernel)
    on_gpu = device().type == "cuda"
    for case in cases:
        if case.dtype == BF16 and not on_gpu:
            continue
        check_case(kernel, case, rule)
    if not gradcheck(kernel, tiny):
        raise GradingFailure("wrong-values", f"{NAME} fails the float64 gradcheck: the dx it writes is not the "
                             "derivative of ⟨softmax(x), ȳ⟩, though it matched the reference.", f"inputs: {tiny.label}")


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


@graded
def softmax_bwd_mixed_kernel(kernel) -> None:
    """Launch on rows in padded buffers, float32/float64/float16 (and bfloat16 on a GPU), within a small multiple of
    what float32 accumulation measures on the same values; a gradcheck."""
    check_mixed_kernel(kernel, *visible_cases())
    gpu = " and bfloat16" if device().type == "cuda" else " (bfloat16 needs a GPU)"
    print(f"✓ {NAME} passes the visible checks (rows walked in blocks inside NaN-padded buffers, float32, float64 and "
          f"float16{gpu} within 2× the error of float32 accumulation on the same values, ȳ far from zero, a float64 "
          "gradcheck)")
