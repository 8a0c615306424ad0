"""Hidden checks for 05_attention_recompute: random float64 inputs, closed-form references.

The flow and the wording are the visible checks' (``course.selfcheck.attention``), so a
student who passed the visible check and fails here reads the same kind of diagnosis.
What is hidden: the inputs (fresh each run; AUTOGRADER_SEED replays one) and the references,
written out in closed form in float64 rather than taken from torch's attention.

Shapes: batch 1 first, then batch 7 (prime); T and the head dim d never powers of two and
never equal; T both below one 64-row block and past it with a ragged last block; one case of
each check has transposed (non-contiguous) inputs. The property cases draw T in [200, 320) —
never a multiple of 64 — with B = 2 and d = 3 or 5, so the largest legitimate tensor is one
2×64×64 tile (8,192 elements) or O(T·d) (3·B·T·d ≤ 9,600), while a (B, 64, T) strip of scores
holds at least 25,600 and T² at least 40,000: the memory checks of Parts C and D refuse both.
The D kernel gets n_rows that are not multiples of BLOCK_M (16 or 32) and head dims that are
not powers of two, in float32 and float64. The FlashAttention kernels get T in [17, 64) not a
multiple of their blocks, head dims in [3, 21), one slab then seven, row-major and transposed
layouts, and a float64 gradcheck on one more draw.
"""

from __future__ import annotations

import math

import torch

from course.diagnose import Alternative, Case, graded
from course.selfcheck.attention import (  # noqa: F401 — HINTS: the same hint pointers as the visible checks
    HINTS, DeltaCase, FlashCase, backward_case, check_attention_function, check_backward_recompute, check_delta_kernel,
    check_flash_dkdv_kernel, check_flash_fwd_kernel, check_forward_lse, check_function_class,
    flash_gradient_alternatives, flash_output_alternatives, gradient_alternatives, output_alternatives,
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


def _case(gen: torch.Generator, B: int, T: int, d: int, note: str = "", transposed: bool = False) -> Case:
    if transposed:  # the right shape, not contiguous: each is the transpose of a (B, d, T) tensor
        q, k, v, do = (randn(gen, B, d, T).mT for _ in range(4))
        note = ", ".join(filter(None, [note, "transposed (non-contiguous) inputs"]))
    else:
        q, k, v, do = (randn(gen, B, T, d) for _ in range(4))
    label = f"q, k, v, ō of shape ({B}, {T}, {d}); batch {B}" + (f", {note}" if note else "")
    return Case(label, (q, k, v, do), batch=B)


def _small_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for B, (t_lo, t_hi), transposed in [(1, (5, 24), False), (1, (24, 60), True), (7, (5, 40), False)]:
        d = _size(gen, 3, 21)  # batch 1 first, then 7
        cases.append(_case(gen, B, _size(gen, t_lo, t_hi, avoid=(d,)), d, transposed=transposed))
    return cases


def _blockwise_cases(gen: torch.Generator) -> list[Case]:
    """Batch 1 below one block, batch 1 past it (transposed), batch 7, then a T ≥ 200 case for the properties."""
    cases = []
    for B, (t_lo, t_hi), d_hi, note, transposed in [
        (1, (5, 60), 21, "T below one block", False),
        (1, (65, 128), 21, "a ragged second block", True),
        (7, (30, 100), 21, "", False),
        (2, (200, 320), 6, "a (B, 64, T) strip would be several tiles", False),  # d = 3 or 5: O(T·d) stays small
    ]:
        d = _size(gen, 3, d_hi)
        cases.append(_case(gen, B, _size(gen, t_lo, t_hi, avoid=(d,)), d, note, transposed))
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


def _flash_cases(gen: torch.Generator) -> list[FlashCase]:
    """One slab, then seven; T past one block and not a multiple of either; row-major, then transposed."""
    cases = []
    for BH, (t_lo, t_hi), block_m, block_n, transposed in [
        (1, (17, 48), 16, 16, False),
        (7, (17, 40), 16, 32, True),
    ]:
        d = _size(gen, 3, 21)
        T = _size(gen, t_lo, t_hi, avoid=(d,))
        while T % 16 == 0:
            T += 1
        cases.append(FlashCase(*(randn(gen, BH, T, d) for _ in range(4)), block_m=block_m, block_n=block_n,
                               transposed=transposed))
    return cases


def _gradcheck_inputs(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    d = _size(gen, 3, 8)
    T = _size(gen, 17, 30, avoid=(d,))
    return tuple(randn(gen, 1, T, d) for _ in range(3))


def _flash_dkdv_reference(q, k, v, do):
    """(o, L, dq, dk, dv) from the closed forms."""
    o, L = forward_reference(q, k, v)
    _, dq, dk, dv = attention_reference(q, k, v, do)
    return o, L, dq, dk, dv


def online_softmax_forward(q, k, v, block_n: int, bug: str):
    """(o, L) by the online softmax over key blocks of ``block_n``, with one named bug applied, float64."""
    q, k, v = (t.to(DTYPE) for t in (q, k, v))
    BH, T, d = q.shape
    c = d ** -0.5
    m = q.new_full((BH, T), -math.inf)
    ell = q.new_zeros(BH, T)
    acc = torch.zeros_like(q)
    for j in range(0, T, block_n):
        kj, vj = k[:, j:j + block_n], v[:, j:j + block_n]
        s = c * q @ kj.mT
        if bug == "padded" and kj.shape[1] < block_n:  # masked-off keys load as 0: score 0, value 0
            s = torch.cat([s, s.new_zeros(BH, T, block_n - kj.shape[1])], dim=-1)
            vj = torch.cat([vj, vj.new_zeros(BH, block_n - kj.shape[1], d)], dim=1)
        m_new = torch.maximum(m, s.amax(dim=-1))
        alpha = torch.ones_like(m) if bug == "stale" else torch.exp(m - m_new)
        p = torch.exp(s - m_new[..., None])
        ell = alpha * ell + p.sum(dim=-1)
        acc = (acc if bug == "acc" else alpha[..., None] * acc) + p @ vj
        m = m_new
    return acc / ell[..., None], m + torch.log(ell)


ONLINE_BUGS = {
    "padded": "gives weight to the keys past T in the last key block: their masked loads give k = 0, so their score "
              "is 0 — a score exp turns into a real weight, not into nothing — and each of them adds to ℓ.",
    "stale": "mixes sums taken under different running maxima: when a later key block raised the row max, what was "
             "already summed (ℓ and the output) was never rescaled to the new max.",
    "acc": "rescales ℓ when the row max grows but not the accumulated output, so the output and ℓ end up under "
           "different maxima.",
}


def _flash_output_alternatives(case: FlashCase) -> dict[str, list[Alternative]]:
    """The visible check's named wrong (o, L), and the online softmax's own bugs, simulated."""
    alts = flash_output_alternatives(case)
    for bug, sentence in ONLINE_BUGS.items():
        o, L = online_softmax_forward(case.q, case.k, case.v, case.block_n, bug)
        alts["o"].append(Alternative("wrong-values", f"o {sentence}", o))
        alts["lse"].append(Alternative("wrong-values", f"lse {sentence}", L))
    return alts


def _flash_gradient_alternatives(case: FlashCase, L, dq, dk, dv) -> dict[str, list[Alternative]]:
    """The visible check's named wrong (dk, dv), and a tile of P that was never normalised by its rows' L."""
    alts = flash_gradient_alternatives(case, L, dq, dk, dv)
    q, k, v, do = (t.to(DTYPE) for t in (case.q, case.k, case.v, case.do))
    c = q.shape[-1] ** -0.5
    E = torch.exp(c * q @ k.mT)  # exp(S) without its rows' L
    D = (do * (torch.softmax(c * q @ k.mT, dim=-1) @ v)).sum(dim=-1)
    sentence = ("uses exp(S) for the tile of P, without the rows' L: those rows do not sum to 1, they sum to exp(L), "
                "the normalisation the forward applied.")
    alts["dk"].append(Alternative("wrong-values", f"dk {sentence}", c * (E * (do @ v.mT - D[..., None])).mT @ q))
    alts["dv"].append(Alternative("wrong-values", f"dv {sentence}", E.mT @ do))
    return alts


@graded
def flash_fwd_kernel(kernel) -> None:
    gen = generator("flash_fwd_kernel")
    check_flash_fwd_kernel(kernel, _flash_cases(gen), forward_reference, _gradcheck_inputs(gen),
                           alternatives=_flash_output_alternatives)


@graded
def flash_bwd_dkdv_kernel(kernel) -> None:
    gen = generator("flash_bwd_dkdv_kernel")
    check_flash_dkdv_kernel(kernel, _flash_cases(gen), _flash_dkdv_reference, _gradcheck_inputs(gen),
                            alternatives=_flash_gradient_alternatives)


__all__ = [
    "ManualAttention", "manual_attention", "attention_forward_lse", "attention_backward_recompute",
    "RecomputeAttention", "recompute_attention", "attention_delta_kernel", "flash_fwd_kernel", "flash_bwd_dkdv_kernel",
]
