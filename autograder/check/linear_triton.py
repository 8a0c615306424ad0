"""Hidden checks for 09_matmul_backward_triton: the visible specs (``course.selfcheck.linear_triton``) on shapes
drawn each run, every side a prime (so no block divides it) and none the visible check's, and rows_per_split drawn
among the lengths that are no multiple of BLOCK_M.
"""

from __future__ import annotations

import torch

from course.selfcheck.linear_triton import (
    ATOMIC_SPEC,
    BLOCK,
    DX_SPEC,
    F16,
    F32,
    F64,
    ROWS_PER_SPLIT,
    SPLITK_SPEC,
    TRITON_LINEAR,
    dw_cases,
    dx_cases,
    linear_cases,
)

from .hidden import hidden

PRIMES = [p for p in range(17, 98) if all(p % d for d in range(2, 10))]  # the primes 17 … 97: no block divides them
SPLITS = [r for r in range(20, 60) if r % BLOCK]  # rows_per_split that leave the loop's last step past the split


def pick(gen: torch.Generator, choices: list[int], low: int = 0, high: int = 10**9) -> int:
    """One of ``choices`` within [low, high], drawn from ``gen``."""
    within = [c for c in choices if low <= c <= high]
    return within[int(torch.randint(len(within), (1,), generator=gen))]


def hidden_dx_cases(gen: torch.Generator) -> list:
    """Batch 1 with a square w, then prime shapes in both dtypes and layouts, a long float16 loop, a gradcheck."""
    square, M, N, K = (pick(gen, PRIMES) for _ in range(4))
    return dx_cases(gen, [
        ("batch 1, square w", 1, square, square, F32),
        ("prime shapes", M, N, K, F32),
        ("prime shapes", M, N, K, F64),
        ("strided w", pick(gen, PRIMES), pick(gen, PRIMES), pick(gen, PRIMES), F32, ("w",)),
        ("strided dy and w", pick(gen, PRIMES), pick(gen, PRIMES), pick(gen, PRIMES), F64, ("dy", "w")),
        ("square w", pick(gen, PRIMES, high=40), square, square, F64),
        ("float16, a long loop over N", 5, pick(gen, PRIMES, low=60) * 3, pick(gen, PRIMES, high=40), F16),
        ("gradcheck", 2, 3, 5),
    ])


def hidden_dw_rows(gen: torch.Generator, bias: list) -> list[tuple]:
    """One split, then two or three splits of a drawn rows_per_split, strided inputs among them."""
    K, N, square = pick(gen, PRIMES, high=60), pick(gen, PRIMES, high=60), pick(gen, PRIMES, high=40)
    rps = pick(gen, SPLITS)
    return [
        ("a single split, square", pick(gen, PRIMES, high=ROWS_PER_SPLIT), square, square, F32, ROWS_PER_SPLIT,
         bias[0]),
        ("a single split", pick(gen, PRIMES, high=ROWS_PER_SPLIT), K, N, F64, ROWS_PER_SPLIT, bias[1]),
        ("several splits", 2 * rps + pick(gen, PRIMES, high=rps), K, N, F32, rps, bias[2]),
        ("several splits, strided", rps + pick(gen, PRIMES, high=rps), N, K, F64, rps, bias[3], ("x", "dy")),
        ("several splits, square", 2 * rps + 1, square, square, F64, rps, bias[4], ("dy",)),
    ]


def hidden_splitk_cases(gen: torch.Generator) -> list:
    return dw_cases(gen, hidden_dw_rows(gen, [True, False, True, False, True]))


def hidden_atomic_cases(gen: torch.Generator) -> list:
    rows = hidden_dw_rows(gen, [None] * 5)
    rows[3] = (*rows[3][:7], ("x", "dw"))  # a strided w̄ too
    return dw_cases(gen, rows)


def hidden_linear_cases(gen: torch.Generator) -> list:
    """One split (2-D, 3-D), then several; float32 and float64; the gradcheck last."""
    K, N = pick(gen, PRIMES, high=41), pick(gen, PRIMES, high=41)  # small: each case runs three kernels, twice
    return linear_cases(gen, [
        ("batch 1", (1, K), N, F64),
        ("one split", (pick(gen, PRIMES, high=ROWS_PER_SPLIT), K), N, F32),
        ("3-D x", (3, pick(gen, PRIMES, high=21), K), N, F64),
        ("several splits", (pick(gen, PRIMES, high=67) + ROWS_PER_SPLIT, K), N, F32),
        ("several splits, 3-D x", (2, pick(gen, PRIMES, low=ROWS_PER_SPLIT // 2 + 1, high=67), K), N, F64),
        ("gradcheck", (3, 2), 3),
    ])


linear_dx_kernel = hidden(DX_SPEC, hidden_dx_cases)
linear_dw_splitk_kernel = hidden(SPLITK_SPEC, hidden_splitk_cases)
linear_dw_atomic_kernel = hidden(ATOMIC_SPEC, hidden_atomic_cases)
TritonLinear = hidden(TRITON_LINEAR, hidden_linear_cases)
