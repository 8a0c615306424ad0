"""Hidden checks for 03_triton_fused_softmax: the two kernels, ``TritonSoftmax``, ``triton_softmax``.

Every call draws fresh inputs (``autograder.inputs.generator``; set AUTOGRADER_SEED to
replay a run) with row lengths that are not powers of two, at batch 1 and batch 7, in
float32 and float64 — the dtypes Triton's interpreter handles — and compares with the
closed forms below. The machinery is the visible checks' (``course.selfcheck.triton_softmax``):
rows inside wider NaN-padded buffers, so that a missing load or store mask is caught and
named with the columns it touches; the same named bugs, so a student reads the same
diagnosis in both, and the same ``HINTS`` point to the notebook's hints. ``TritonSoftmax`` is also
put through ``torch.autograd.gradcheck`` in float64.

Non-contiguous inputs: every kernel case is a strided view (rows inside wider buffers; the
kernel's contract is adjacent elements within a row), ``TritonSoftmax`` gets a transposed ȳ
and ``triton_softmax`` a transposed x.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course.diagnose import graded
from course.selfcheck.triton_softmax import (  # noqa: F401 — HINTS: the hint pointers course.diagnose.graded reads
    BWD, F32, F64, FWD, HINTS, ClassCase, FunctionCase, backward_case, check_function_class, check_kernel,
    check_softmax_function, forward_case,
)

from ..inputs import generator, randn

MAX_COLS = 8192  # the row length the notebook promises to handle in one block


# ---------------------------------------------------------------------------
# References: closed forms in float64, never shown to students.


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    """y = exp(x − m) / Σ exp(x − m) over the last axis, m the row max."""
    x = x.to(F64)
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def softmax_backward_reference(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """x̄ = y ⊙ (ȳ − s), s = Σ y·ȳ over the last axis."""
    y, dy = y.to(F64), dy.to(F64)
    s = torch.einsum("...n,...n->...", y, dy)[..., None]
    return y * (dy - s)


def both_reference(x: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = softmax_reference(x)
    return y, softmax_backward_reference(y, dy)


# ---------------------------------------------------------------------------
# Inputs


def odd_length(gen: torch.Generator, low: int, high: int) -> int:
    """A row length in [low, high] that is not a power of two, so the block has a masked tail."""
    n = int(torch.randint(low, high + 1, (1,), generator=gen))
    return n + 1 if n & (n - 1) == 0 else n


def kernel_shapes(gen: torch.Generator) -> list[tuple[int, int, torch.dtype]]:
    """(n_rows, n_cols, dtype). Batch 1 first; every length leaves a masked tail."""
    short, mid, long = odd_length(gen, 3, 60), odd_length(gen, 65, 300), odd_length(gen, 1000, 2000)
    return [
        (1, short, F32),  # batch 1, a short row
        (1, short, F64),
        (7, mid, F32),  # batch 7 (prime): row strides and program ids matter
        (7, mid, F64),
        (2, long, F64),  # a long row: one block of 1024 or 2048 lanes
    ]


def class_cases(gen: torch.Generator) -> list[ClassCase]:
    shapes = [(1, odd_length(gen, 3, 40), F64), (7, odd_length(gen, 41, 200), F64), (7, odd_length(gen, 5, 100), F32)]
    return [ClassCase(randn(gen, r, n), randn(gen, r, n), dt) for r, n, dt in shapes]


def function_cases(gen: torch.Generator) -> list[FunctionCase]:
    n = odd_length(gen, 3, 100)
    cases = []
    for shape, dt, transposed, note in [
        ((n,), F64, False, "1-D"),
        ((1, n), F64, False, "batch 1"),
        ((7, n), F32, False, "batch 7"),
        ((7, n), F64, False, "batch 7"),
        ((2, 3, n), F64, False, "3-D"),
        ((2, 1, 3, n), F32, False, "4-D with a size-1 axis"),
        ((6, odd_length(gen, 5, 50)), F64, True, ""),
        ((2, odd_length(gen, 4100, MAX_COLS - 1)), F32, False, "long rows"),
        ((1, MAX_COLS), F64, False, "the longest row promised"),
    ]:
        cases.append(FunctionCase(randn(gen, *shape), randn(gen, *shape), dt, transposed, note))
    return cases


# ---------------------------------------------------------------------------
# The checks


@graded
def softmax_fwd_kernel(kernel: Callable) -> None:
    """Grade the forward kernel on NaN-padded strided rows, float32 and float64, plus large logits."""
    gen = generator("softmax_fwd_kernel")
    cases = [forward_case(randn(gen, r, n), dt, softmax_reference) for r, n, dt in kernel_shapes(gen)]
    large = randn(gen, 3, odd_length(gen, 10, 40), scale=30.0) + 100.0  # exp(x) overflows float32 without the max shift
    cases.append(forward_case(large, F32, softmax_reference, large=True))
    check_kernel(FWD, kernel, cases)


@graded
def softmax_bwd_kernel(kernel: Callable) -> None:
    """Grade the backward kernel on NaN-padded strided rows, float32 and float64."""
    gen = generator("softmax_bwd_kernel")
    cases = []
    for r, n, dt in kernel_shapes(gen):
        y = softmax_reference(randn(gen, r, n, scale=2.0))
        cases.append(backward_case(y, randn(gen, r, n), dt, softmax_backward_reference))
    check_kernel(BWD, kernel, cases)


@graded
def TritonSoftmax(cls) -> None:  # noqa: N802 — named after the exercise it checks
    """Grade the autograd.Function: values, y saved alone, strided ȳ, no autograd in backward, gradcheck."""
    gen = generator("TritonSoftmax")
    check_function_class(cls, class_cases(gen), both_reference,
                         gradcheck_x=randn(gen, 2, odd_length(gen, 3, 9)))


@graded
def triton_softmax(fn: Callable) -> None:
    """Grade softmax over the last dim of 1-D to 4-D inputs, a transposed view, and rows up to 8192."""
    gen = generator("triton_softmax")
    check_softmax_function(fn, function_cases(gen), both_reference)
