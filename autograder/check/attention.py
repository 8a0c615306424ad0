"""Hidden checks for 05_attention_recompute: random float64 inputs, closed-form references.

The flow and the wording are the visible checks' (``course.selfcheck.attention``), so a
student who passed the visible check and fails here reads the same kind of diagnosis.
What is hidden: the inputs (fresh each run; AUTOGRADER_SEED replays one) and the references,
written out in closed form in float64 rather than taken from torch's attention.

Shapes: batch 1 first, then batch 7 (prime); T and the head dim d never powers of two and
never equal; T both below one 64-row block and past it with a ragged last block. The
property cases draw T in [200, 320) — never a multiple of 64 — with B = 2 and d ≤ 12, so
T² (at least 40,000 elements) is far above every legitimate tensor: (B, T, d) holds at most
7,680, a 64×64 tile 8,192, and even a (B, 64, T) strip, 128·T, stays below T² for T > 128.
The D kernel gets n_rows that are not multiples of BLOCK_M (16 or 32) and head dims that are
not powers of two, in float32 and float64.
"""

from __future__ import annotations

import math

import torch

from course.diagnose import Case, graded
from course.selfcheck.attention import (
    DeltaCase, backward_case, check_attention_function, check_backward_recompute, check_delta_kernel,
    check_forward_lse, check_function_class, gradient_alternatives, output_alternatives,
)

from ..inputs import DTYPE, generator, randn

# ---------------------------------------------------------------------------
# References: closed forms in float64, never shown to students.


def forward_reference(q, k, v):
    """o = P v and L = logsumexp of S = q kᵀ/√d per row, with P = exp(S − L)."""
    q, k, v = (t.to(DTYPE) for t in (q, k, v))
    S = q @ k.mT / math.sqrt(q.shape[-1])  # (B, T, T)
    L = torch.logsumexp(S, dim=-1)  # (B, T)
    return torch.exp(S - L[..., None]) @ v, L


def attention_reference(q, k, v, do):
    """(o, dq, dk, dv) of attention for the upstream gradient do, from the formulas."""
    q, k, v, do = (t.to(DTYPE) for t in (q, k, v, do))
    c = 1 / math.sqrt(q.shape[-1])
    S = c * q @ k.mT
    P = torch.softmax(S, dim=-1)
    o = P @ v
    D = (do * o).sum(dim=-1, keepdim=True)  # = rowsum(dP ⊙ P)
    dS = P * (do @ v.mT - D)
    return o, c * dS @ k, c * dS.mT @ q, P.mT @ do


def _alternatives(q, k, v, do, dq, dk, dv):
    return {**output_alternatives(q, k, v), **gradient_alternatives(q, k, v, do, dq, dk, dv)}


# ---------------------------------------------------------------------------
# Inputs


def _size(gen: torch.Generator, low: int, high: int, avoid: tuple[int, ...] = ()) -> int:
    """A size in [low, high) that is not a power of two, not a multiple of 64, and not in ``avoid``."""
    while True:
        n = int(torch.randint(low, high, (1,), generator=gen))
        if n & (n - 1) and n % 64 and n not in avoid:
            return n


def _case(gen: torch.Generator, B: int, T: int, d: int, note: str = "") -> Case:
    q, k, v, do = (randn(gen, B, T, d) for _ in range(4))
    label = f"q, k, v, ō of shape ({B}, {T}, {d}); batch {B}" + (f", {note}" if note else "")
    return Case(label, (q, k, v, do), batch=B)


def _small_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for B, (t_lo, t_hi) in [(1, (5, 24)), (1, (24, 60)), (7, (5, 40))]:  # batch 1 first, then 7
        d = _size(gen, 3, 21)
        cases.append(_case(gen, B, _size(gen, t_lo, t_hi, avoid=(d,)), d))
    return cases


def _blockwise_cases(gen: torch.Generator) -> list[Case]:
    """Batch 1 below one block, batch 1 past it, batch 7, then a T ≥ 200 case for the properties."""
    cases = []
    for B, (t_lo, t_hi), d_hi, note in [
        (1, (5, 60), 21, "T below one block"),
        (1, (65, 128), 21, "a ragged second block"),
        (7, (30, 100), 21, ""),
        (2, (200, 320), 13, "T² far above any tile"),
    ]:
        d = _size(gen, 3, d_hi)
        cases.append(_case(gen, B, _size(gen, t_lo, t_hi, avoid=(d,)), d, note))
    return cases


# ---------------------------------------------------------------------------
# The checks


def _manual_class_check(cls) -> None:
    check_function_class("ManualAttention", cls, _small_cases(generator("ManualAttention")),
                         reference=attention_reference, alternatives=_alternatives)


_RECOMPUTE_HELPERS = (("attention_forward_lse", "Part C"), ("attention_backward_recompute", "Part D"))


def _recompute_class_check(cls) -> None:
    check_function_class("RecomputeAttention", cls, _blockwise_cases(generator("RecomputeAttention")),
                         reference=attention_reference, alternatives=_alternatives, recompute=True,
                         helpers=_RECOMPUTE_HELPERS)


@graded
def ManualAttention(cls) -> None:  # noqa: N802 — named after the exercise it checks
    _manual_class_check(cls)


@graded
def manual_attention(fn) -> None:
    check_attention_function("manual_attention", fn, _small_cases(generator("manual_attention")),
                             owner="ManualAttention", part="Part A", class_check=_manual_class_check,
                             reference=attention_reference, alternatives=_alternatives)


@graded
def attention_forward_lse(fn) -> None:
    check_forward_lse(fn, _blockwise_cases(generator("attention_forward_lse")), reference=forward_reference,
                      alternatives=lambda case: output_alternatives(*case.args))


@graded
def attention_backward_recompute(fn) -> None:
    cases = [backward_case(c, forward_reference) for c in _blockwise_cases(generator("attention_backward_recompute"))]

    def alternatives(case: Case):
        q, k, v, o, lse, do = case.args
        return gradient_alternatives(q, k, v, do, *attention_reference(q, k, v, do)[1:])

    check_backward_recompute(fn, cases, reference=lambda q, k, v, o, lse, do: attention_reference(q, k, v, do)[1:],
                             alternatives=alternatives)


@graded
def RecomputeAttention(cls) -> None:  # noqa: N802 — named after the exercise it checks
    _recompute_class_check(cls)


@graded
def recompute_attention(fn) -> None:
    check_attention_function("recompute_attention", fn, _blockwise_cases(generator("recompute_attention")),
                             owner="RecomputeAttention", part="Part E", class_check=_recompute_class_check,
                             reference=attention_reference, alternatives=_alternatives, recompute=True)


def _delta_reference(o: torch.Tensor, do: torch.Tensor) -> torch.Tensor:
    """D_r = Σ_e O[r, e]·Ō[r, e], float64."""
    return torch.einsum("re,re->r", o.to(DTYPE), do.to(DTYPE))


@graded
def attention_delta_kernel(kernel) -> None:
    gen = generator("attention_delta_kernel")
    cases = []
    for dtype, block_m, (lo, hi) in [
        (torch.float32, 16, (3, 16)),  # a single, partial block
        (torch.float64, 16, (17, 60)),  # several blocks, the last one ragged
        (torch.float32, 32, (33, 200)),
        (torch.float64, 32, (100, 300)),
    ]:
        n = _size(gen, lo, hi)
        while n % block_m == 0:
            n += 1
        d = _size(gen, 3, 40)
        cases.append(DeltaCase(randn(gen, n, d), randn(gen, n, d), dtype, block_m))
    check_delta_kernel(kernel, cases, _delta_reference)


__all__ = [
    "ManualAttention", "manual_attention", "attention_forward_lse", "attention_backward_recompute",
    "RecomputeAttention", "recompute_attention", "attention_delta_kernel",
]
