"""Hidden checks for 05_attention_recompute: the visible checks (``course.selfcheck.attention``) on fresh inputs.

The input builders, the reference, the runners, the property checks and the named bugs are the visible module's,
so a student who passed the visible check and fails here reads the same kind of diagnosis. What is hidden: the
inputs, drawn fresh each run from the ranges below (AUTOGRADER_SEED replays one draw; a size drawn from a range is
never a power of two nor a multiple of 64, and T never equals d), and the bugs of the FlashAttention kernels' loops,
whose simulation would spell those loops out in the package students receive.
"""

from __future__ import annotations

import math

import torch

from course.diagnose import Alternative
from course.selfcheck import attention as visible
from course.selfcheck.attention import AttentionShape, DeltaShape, FlashCase, FlashShape

from ..inputs import DTYPE, generator
from .hidden import hidden

# Each set comes batch 1 first, then batch 7 (prime): a sum or transpose across the batch axis is right at
# batch 1 and wrong after it, which names it a batch-axis bug. T ≠ d everywhere, so a (T, d) operand used
# transposed changes a shape instead of hiding behind a square one.
SMALL = (  # Parts A and B
    AttentionShape(1, (5, 24), (3, 21)),
    AttentionShape(1, (24, 60), (3, 21), transposed=True),  # non-contiguous: code that assumes a layout (.view)
    AttentionShape(7, (5, 40), (3, 21)),
)
BLOCKWISE = (  # Parts C to F
    AttentionShape(1, (5, 60), (3, 21), "T below one block"),  # a loop that needs a full 64-row block
    AttentionShape(1, (65, 128), (3, 21), "a ragged second block", transposed=True),  # a last block run past T
    AttentionShape(7, (30, 100), (3, 21)),
    # The property case, T several blocks long: with B = 2 and d in 3…5 the largest legitimate tensor is one
    # 2×64×64 tile (8,192 elements) or O(T·d) (3·B·T·d < 7,700), while a (B, 64, T) strip of scores holds at
    # least 25,600 and T² at least 40,000: refused by their size. T stays below 256 so that a (B, 16, T) strip
    # (< 8,192, under the size bound as at the visible T = 256) is refused as `untiled` on both sides, by
    # the key rows it spans, and not by its size on one side only.
    AttentionShape(2, (200, 256), (3, 6), "a (B, 64, T) strip would be several tiles"),
)
# Part C only: T so long that all of S (T² = 16.8 M scores, 134 MB in float64) stands far above what a tiled walk
# touches, the worker's own memory included; the grader counts it from outside the worker (course.witness), so S
# written into a buffer made before the call counts as one tensor does (S in pieces alive together is a strip each:
# `untiled` at the property case). An honest walk touches about 32 MB and takes about 1.3 s on a CPU at BLOCK = 64;
# Part D's backward is left to the property case, which follows its token rows, to keep the checks' time.
COUNTED = AttentionShape(1, (4101, 4163), (3, 5), "all of S counted by the operating system")
DELTA = (  # n_rows never a multiple of BLOCK_M (a store without its row mask); head dims not powers of two
    DeltaShape((3, 16), (3, 40), torch.float32, 16),  # a single, partial block
    DeltaShape((17, 60), (3, 40), torch.float64, 16),  # several blocks, the last one ragged; float64: fp32 sums show
    DeltaShape((33, 200), (3, 40), torch.float32, 32),
    DeltaShape((100, 300), (3, 40), torch.float64, 32),
)
FLASH = (  # T past one block and a multiple of neither: padded keys and rows past T show
    FlashShape(1, (17, 48), (3, 21), 16, 16),  # one slab, row-major
    FlashShape(7, (17, 40), (3, 21), 16, 32, transposed=True),  # seven slabs; token axis of stride 1: strides ignored
)
GRADCHECK = AttentionShape(1, (17, 30), (3, 8))  # one more draw, for the float64 gradcheck through a kernel

# ---------------------------------------------------------------------------
# Bugs only the hidden checks name: the online softmax's, and a tile of P never normalised by L


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
    alts = visible.output_alternatives(case.q, case.k, case.v)
    for bug, sentence in ONLINE_BUGS.items():
        o, L = online_softmax_forward(case.q, case.k, case.v, case.block_n, bug)
        alts["o"].append(Alternative("wrong-values", f"o {sentence}", o))
        alts["lse"].append(Alternative("wrong-values", f"lse {sentence}", L))
    return alts


def _flash_gradient_alternatives(case: FlashCase) -> dict[str, list[Alternative]]:
    """The visible check's named wrong (dk, dv), and a tile of P that was never normalised by its rows' L."""
    q, k, v, do = case.q, case.k, case.v, case.do
    alts = visible.gradient_alternatives(q, k, v, do)
    c, _, P_bar, D = visible.softmax_pieces(q, k, v, do)
    E = torch.exp(c * q @ k.mT)  # exp(S) without its rows' L
    sentence = ("uses exp(S) for the tile of P, without the rows' L: those rows do not sum to 1, they sum to exp(L), "
                "the normalisation the forward applied.")
    alts["dk"].append(Alternative("wrong-values", f"dk {sentence}", c * (E * (P_bar - D[..., None])).mT @ q))
    alts["dv"].append(Alternative("wrong-values", f"dv {sentence}", E.mT @ do))
    return alts


# ---------------------------------------------------------------------------
# The checks: the visible specs on this run's draws, a generator of its own for each set of inputs


def _draw(shapes: tuple[AttentionShape, ...], owner: str | None = None):
    """The cases of ``shapes`` from this check's generator (and, for a function run through its Function ``owner``,
    the Function's own cases, from the Function's generator)."""
    if owner is None:
        return lambda gen: visible.attention_cases(gen, shapes)
    return lambda gen: (visible.attention_cases(gen, shapes), visible.attention_cases(generator(owner), shapes))


def _flash(gen: torch.Generator) -> list:
    return visible.flash_cases_and_gradcheck(gen, FLASH, GRADCHECK)  # the gradcheck's inputs after the cases


SPECS = visible.SPECS
ManualAttention = hidden(SPECS["ManualAttention"], _draw(SMALL))
manual_attention = hidden(SPECS["manual_attention"], _draw(SMALL, "ManualAttention"))
attention_forward_lse = hidden(SPECS["attention_forward_lse"], _draw(BLOCKWISE + (COUNTED,)))
attention_backward_recompute = hidden(SPECS["attention_backward_recompute"], _draw(BLOCKWISE))
RecomputeAttention = hidden(SPECS["RecomputeAttention"], _draw(BLOCKWISE))
recompute_attention = hidden(SPECS["recompute_attention"], _draw(BLOCKWISE, "RecomputeAttention"))
attention_delta_kernel = hidden(SPECS["attention_delta_kernel"], lambda gen: visible.delta_cases(gen, DELTA))
flash_fwd_kernel = hidden(SPECS["flash_fwd_kernel"], _flash, _flash_output_alternatives)
flash_bwd_dkdv_kernel = hidden(SPECS["flash_bwd_dkdv_kernel"], _flash, _flash_gradient_alternatives)
