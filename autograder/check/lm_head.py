"""Hidden checks for 07_fused_linear_cross_entropy: the visible specs (``course.selfcheck.lm_head``) on this module's
shapes, and the alternatives that would give the derivation away (the logits' gradient, the online rescaling).

Each walk has a step of one, one that divides T (V), one that does not and one longer than the sequence
(vocabulary); the memory cases come last, d small enough that a walk in two halves stands well above the allowance.
"""

from __future__ import annotations

import torch

from course.diagnose import Alternative, Case, distinct_from, graded
from course.selfcheck import ce_grad
from course.selfcheck.lm_head import (
    EXERCISES,
    IGNORE,
    Shape,
    chunk_alternatives,
    chunk_starts,
    counted,
    head_alternatives,
    head_case,
    lse_alternatives,
)
from course.spec import merged

from ..inputs import generator
from .hidden import hidden

HEAD_SHAPES = [
    Shape("batch 1", T=1, V=13, d=5),  # one token: a missing 1/n cannot show yet
    Shape("batch 7", T=7, V=17, d=6),  # the mean over 7 tokens; dW a sum over them
    Shape("batch 7, V = d", T=7, V=9, d=9),  # square W: a transposed dW, or W where Wᵀ belongs, keep their shapes
    Shape("batch 7", T=7, V=23, d=5, ignored=3),  # 4 counted tokens of 7: the mean's count
    Shape("batch 11, d > V", T=11, V=7, d=13, ignored=1),  # more features than classes
    Shape("batch 9", T=9, V=19, d=6, ignored=2, transposed=True),  # code that depends on the layout
    Shape("batch 6", T=6, V=10, d=3, ignored=1, logits=1500.0),  # exp of the raw logits overflows float64
]
CHUNK_SHAPES = [
    Shape("batch 1", T=1, V=11, d=5, size=1),  # one token, a chunk of one
    Shape("batch 7", T=7, V=13, d=5, size=3),  # chunks of 3, 3 and 1: the last one shorter
    Shape("batch 7, one chunk", T=7, V=10, d=3, size=7),  # chunk = T: the walk is one step
    Shape("batch 10, V = d", T=10, V=6, d=6, size=4),  # square W: a transposed dW keeps its shape
    Shape("batch 11", T=11, V=9, d=5, size=5, ignored=4),  # chunks count different numbers of tokens
    Shape("batch 6, chunk > T", T=6, V=7, d=3, size=12, ignored=2),  # a chunk longer than the sequence
    Shape("batch 13", T=13, V=11, d=5, size=6, ignored=2, transposed=True),  # code that depends on the layout
    Shape("batch 10", T=10, V=9, d=5, size=3, logits=1500.0),  # exp of the raw logits overflows float64
]
LAST_CHUNK_IGNORED = Shape("batch 12", T=12, V=10, d=5, size=5)  # chunks 5, 5, 2; the last one's targets ignored
# 443 tokens = 16.4 chunks of 27. Allowed: one chunk's logits and h's and W's sizes, 7,101 + 5,759 + 3,419 = 16,279
# elements; two halves of T make 222 × 263 = 58,386.
MEMORY_CHUNK = Shape("long sequence", T=443, V=263, d=13, size=27, ignored=7)
# All T×V logits are 135 MB here, a chunk's 2 MB: the grader counts the memory the call touches from outside the
# worker (course.witness.counted_by_os), so logits written into a buffer made beforehand, or in halves alive
# together, count as well as one allocation does. An honest walk touches about 24 MB.
COUNTED_CHUNK = Shape("long sequence, memory counted", T=4099, V=4111, d=13, size=61, ignored=9)
LSE_SHAPES = [
    Shape("batch 1", T=1, V=9, d=5, size=4),  # blocks of 4, 4 and 1
    Shape("batch 7", T=7, V=17, d=5, size=5),  # blocks of 5, 5, 5 and 2
    Shape("batch 7, block = 1", T=7, V=6, d=3, size=1),  # a block of one class
    Shape("batch 5, block > V", T=5, V=7, d=3, size=8),  # one block, longer than the vocabulary
    Shape("batch 9", T=9, V=13, d=6, size=3, transposed=True),  # code that depends on the layout
    Shape("batch 6", T=6, V=19, d=5, size=4, logits=1500.0),  # the running max grows from block to block
    # 353 classes = 16.04 blocks of 22: the memory rule; allowed 7,282 + 3,641 + 3,883 = 14,806 elements, two
    # halves of the vocabulary 331 × 177 = 58,587.
    Shape("long vocabulary", T=331, V=353, d=11, size=22),
    Shape("long vocabulary, memory counted", T=4099, V=4111, d=11, size=61),  # as COUNTED_CHUNK, by block
]


def _last_chunk_ignored(gen: torch.Generator) -> Case:
    """Every target of the last chunk is ignore_index: a mean per chunk divides 0 by 0 there."""
    case = head_case(gen, LAST_CHUNK_IGNORED, "chunk")
    h, W, target, chunk = case.args
    target[chunk_starts(len(target), chunk)[-1]:] = IGNORE
    return Case(case.label + ", every target of the last chunk ignore_index (−100)", case.args, batch=case.batch)


def _chunk_cases(gen: torch.Generator) -> list[Case]:
    ex = EXERCISES["chunked_linear_ce"]
    return ex.cases(gen, CHUNK_SHAPES) + [_last_chunk_ignored(gen)] + ex.cases(gen, [MEMORY_CHUNK, COUNTED_CHUNK])


def _formula_alternatives(case: Case) -> dict[str, list[Alternative]]:
    """A bug of the derivation itself, built from the softmax: shown only here, it would spell the gradient out."""
    h, W, target = case.args[:3]
    n = counted(target)
    z = h @ W.T  # (T, V)
    kept = (target != IGNORE).to(z.dtype)[:, None] / n  # (T, 1): 1/n for a counted token, 0 for an ignored one
    p = torch.softmax(z, -1) * kept  # the logits' gradient without the target's −1
    missing = ("is what the softmax alone gives: the target's own logit enters the loss a second time, outside the "
               "log-sum-exp, and its gradient is missing.")
    return {out: [Alternative("wrong-values", f"{out} {missing}", value)] for out, value in (("dh", p @ W), ("dW", p.T @ h))}


def _online_alternatives(case: Case) -> dict[str, list[Alternative]]:
    """The online log-sum-exp's bugs: the running sum not rescaled when the max grows, or rescaled upside down."""
    h, W, block = case.args
    z = h @ W.T  # (T, V)
    right = torch.logsumexp(z, -1)
    found = lse_alternatives(case)["lse"]
    for sign, sentence in ((0, "lse keeps the running sum as it was when the running max grows: what it summed "
                               "was measured from the old max, and must be brought to the new one."),
                           (-1, "lse rescales the running sum the wrong way when the running max grows: a larger "
                                "max makes every earlier term smaller, not larger.")):
        m = torch.full_like(right, float("-inf"))
        s = torch.zeros_like(right)
        for zb in z.split(block, dim=-1):
            new = torch.maximum(m, zb.amax(-1))
            factor = torch.exp(sign * (m - new)) if sign else torch.ones_like(s)
            s = torch.where(torch.isfinite(m), s * factor, s) + torch.exp(zb - new[:, None]).sum(-1)
            m = new
        found.append(Alternative("wrong-values", sentence, m + s.log(), "blocks"))
    return {"lse": distinct_from(found, right)}


HEAD, CHUNK = EXERCISES["linear_ce_backward"], EXERCISES["chunked_linear_ce"]
linear_ce_backward = hidden(HEAD, HEAD_SHAPES, merged(head_alternatives, _formula_alternatives, distinct=HEAD))
chunked_linear_ce = hidden(CHUNK, _chunk_cases, merged(chunk_alternatives, _formula_alternatives, distinct=CHUNK))
vocab_blocked_lse = hidden(EXERCISES["vocab_blocked_lse"], LSE_SHAPES, _online_alternatives)



def _ce_grad_cases(gen: torch.Generator) -> tuple[list[ce_grad.KernelCase], ce_grad.KernelCase]:
    """Part D's chunks: sizes of their own (V never a power of two, always wider than BLOCK_V), n counting other
    chunks' tokens, ignored rows, large logits, one float32 case; then the tiny gradcheck case."""
    make = ce_grad.kernel_case
    cases = [
        make(gen, "batch 1", 1, 7, extra=2, block=4),  # one row of a larger batch
        make(gen, "batch 7", 7, 17, ignored=3, extra=5),  # blocks of 8, 8 and 1
        make(gen, "batch 9, BLOCK_V = 2", 9, 11, ignored=1, block=2),
        make(gen, "batch 6, every target but one ignored", 6, 9, ignored=5, extra=4),
        make(gen, "batch 5, logits up to ±1500", 5, 23, ignored=1, scale=450.0),
        make(gen, "batch 11, float32", 11, 37, ignored=2, dtype=torch.float32, block=16),
    ]
    return cases, make(gen, "gradcheck", 4, 5, ignored=1, extra=1, block=2)


@graded
def ce_grad_kernel(kernel) -> None:
    """The visible check's flow, on chunks drawn from this run's generator."""
    ce_grad.check_ce_grad_kernel(kernel, *_ce_grad_cases(generator("ce_grad_kernel")))
