"""Hidden checks for 03_triton_fused_softmax: the visible specs (``course.selfcheck.triton_softmax``) on rows drawn
each run, never a power of two; the float16 backward's ȳ has a common part of a sign and size drawn each run (the
visible check's is always 10), and ``TritonSoftmax`` ends with a float64 gradcheck.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from course.selfcheck.triton_softmax import (
    BWD,
    F32,
    F64,
    FWD,
    TRITON_SOFTMAX,
    WRAPPER,
    KernelCase,
    backward_cases,
    forward_cases,
    function_cases,
    gradcheck_case,
    half_backward_case,
    half_forward_case,
    large_forward_case,
)

from ..inputs import randn, signs, uniform
from .hidden import hidden

MAX_COLS = 8192  # the row length the notebook promises to handle in one block


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


def class_table(gen: torch.Generator) -> list[tuple[tuple[int, int], torch.dtype]]:
    """(shape of x, dtype): batch 1, then batch 7 in both dtypes."""
    return [((1, odd_length(gen, 3, 40)), F64), ((7, odd_length(gen, 41, 200)), F64), ((7, odd_length(gen, 5, 100)), F32)]


def function_table(gen: torch.Generator) -> list[tuple[tuple[int, ...], torch.dtype, bool, str]]:
    """(shape of x, dtype, a transposed view?, what the label notes)."""
    n = odd_length(gen, 3, 100)
    return [
        ((n,), F64, False, "1-D"),
        ((1, n), F64, False, "batch 1"),
        ((7, n), F32, False, "batch 7"),
        ((7, n), F64, False, "batch 7"),
        ((2, 3, n), F64, False, "3-D"),
        ((2, 1, 3, n), F32, False, "4-D with a size-1 axis"),
        ((6, odd_length(gen, 5, 50)), F64, True, ""),
        ((2, odd_length(gen, 4100, MAX_COLS - 1)), F32, False, "long rows"),
        ((1, MAX_COLS), F64, False, "the longest row promised"),
    ]


def _forward_cases(gen: torch.Generator) -> list[KernelCase]:
    """NaN-padded strided rows, float32 and float64; large logits; float16 rows long enough to show a rounded ℓ."""
    cases = forward_cases(gen, kernel_shapes(gen))
    half = half_forward_case(gen, 3, odd_length(gen, 700, 2000))
    return cases + [large_forward_case(gen, 3, odd_length(gen, 10, 40)), half]


def _backward_cases(gen: torch.Generator) -> list[KernelCase]:
    """NaN-padded strided rows, float32 and float64, logits of standard deviation 2; float16 rows, ȳ far from zero."""
    half = half_backward(gen, 3, odd_length(gen, 300, 2000))
    return backward_cases(gen, kernel_shapes(gen), scale=2.0) + [half]


HALF_COMMON = (6.0, 24.0)  # the size of ȳ's common part on the float16 backward case (the visible check's: 10)


def half_backward(gen: torch.Generator, rows: int, n: int) -> KernelCase:
    """The float16 backward case with a common part of ȳ drawn from ``gen`` (sign and size), not the visible
    check's 10 that a kernel could recognize; the case's sentence says which it was."""
    offset = float(signs(gen) * uniform(gen, *HALF_COMMON))
    spacing = math.floor(math.log2(abs(offset))) - 10  # float16's spacing near s: 2 to this power
    statistic = (f"the hub s (or the products it adds) was held in float16: s ≈ {offset:.1f} here, where float16's "
                 f"spacing is 2**{spacing}, and ȳ − s, of order 1, cancels the bits s kept")
    return replace(half_backward_case(gen, rows, n, offset), statistic=statistic)


def _class_cases(gen: torch.Generator) -> list:
    """Values, y saved alone, strided ȳ, no autograd in backward; then float64 gradcheck."""
    cases = function_cases(gen, class_table(gen))
    return cases + [gradcheck_case(randn(gen, 2, odd_length(gen, 3, 9)))]


softmax_fwd_kernel = hidden(FWD, _forward_cases)
softmax_bwd_kernel = hidden(BWD, _backward_cases)
TritonSoftmax = hidden(TRITON_SOFTMAX, _class_cases)
triton_softmax = hidden(WRAPPER, lambda gen: function_cases(gen, function_table(gen)))  # 1-D to 4-D, rows up to 8192
