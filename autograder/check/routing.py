"""Hidden checks for 06_topk_routing: ``course.selfcheck.routing``'s runner on this module's shapes, drawn fresh
each run (docs/grading.md, "Seeds: reproducible grades"), and the MoE alternatives that would give the derivation away.

Scatters run without repeated indices first, then with them, the last slot (where an off-by-one hides) always
among the repeats; inputs have no ties (``autograder.inputs.distinct``) and ReLU inputs keep away from the kink.
"""

from __future__ import annotations

import torch

from course.diagnose import Alternative, Case
from course.selfcheck.routing import (
    EXERCISES,
    F32,
    F64,
    SCATTER_ADD,
    dropout_cases,
    embedding_cases,
    kernel_cases,
    maxpool_cases,
    moe_cases,
    moe_reference,
    relu_cases,
    topk_cases,
)

from ..inputs import distinct
from .hidden import hidden


def _topk_cases(gen) -> list:
    return topk_cases(
        gen, distinct,
        top=(("batch 1", (1,), 11, 4), ("batch 7", (7,), 13, 5), ("3-D", (2, 5), 9, 3)),
        transposed=("batch 9", (9,), 11, 4),
        # k > n: repeats in every row, so a store keeps one ȳ where an add keeps them all
        repeated=(("batch 1", (1,), 7, 9), ("batch 7", (7,), 6, 10), ("3-D", (3, 2), 5, 7)),
    )


def _embedding_cases(gen) -> list:
    return embedding_cases(
        gen, widths=(3, 8),
        distinct=(("batch 1", (1, 6), 13), ("batch 7", (7, 5), 41)),  # batch 7: a sum over the batch is needed
        transposed=("batch 5", (5, 3), 19),
        # a token read twice: a store (dW[ids] = ȳ) keeps one of its gradients; 1-D and 3-D ids flatten differently
        repeated=(("batch 1", (1, 9), 5), ("batch 7", (7, 6), 11), ("1-D ids", (13,), 6), ("3-D ids", (2, 3, 5), 9)),
    )


def _maxpool_cases(gen) -> list:
    # (label, lead, L, kernel_size, stride); (L − K) % s == 0, so the last window ends at L − 1
    return maxpool_cases(
        gen, distinct,
        apart=(("batch 1", (1,), 12, 3, 3),
               ("batch 1", (1,), 14, 2, 3),  # stride > kernel_size at batch 1: windows placed j·kernel_size apart show
               ("batch 7", (7,), 14, 2, 3),  # stride > kernel_size: positions no window reads get 0
               ("3-D", (2, 3), 10, 5, 5)),
        transposed=("batch 9", (9,), 12, 4, 4),
        # a position that is the max of two windows: a store keeps one window's ȳ
        overlapping=(("batch 1", (1,), 11, 3, 1), ("batch 7", (7,), 14, 4, 2), ("3-D", (2, 3), 14, 5, 3)),
    )


def _relu_cases(gen) -> list:
    # |x| ≥ 0.01: x > 0 and x >= 0 are the same answer on x; on y = relu(x) (an in-place ReLU) they are not
    return relu_cases(gen, (("batch 1", (1, 9)), ("batch 7", (7, 13)), ("3-D", (3, 5, 7))),
                      transposed=("batch 9", (9, 11)), margin=1e-2,
                      in_place=(("batch 1", (1, 11)), ("3-D", (2, 3, 7))))


def _dropout_cases(gen) -> list:
    # p on both sides of 0.5, where 1/p and 1/(1 − p) coincide. Batch 1 is long enough that a freshly drawn
    # mask cannot match the forward's by luck (then a failure at batch 7 would read as a missing batch reduction).
    return dropout_cases(gen, (("batch 1", (1, 23), (0.25, 0.4)), ("batch 7", (7, 9), (0.55, 0.8)),
                               ("3-D", (3, 4, 5), (0.2, 0.45))),
                         transposed=("batch 9", (9, 10), (0.2, 0.8)))


def _moe_cases(gen) -> list:
    return moe_cases(gen, (
        ("batch 1", (1,), 7, 2, 5),
        ("batch 7", (7,), 6, 3, 4),
        ("batch 7", (7,), 5, 1, 3),  # top-1
        ("batch 7", (7,), 4, 4, 2),  # every expert chosen: the gates sum to 1
        ("3-D (batch, tokens)", (2, 5), 9, 2, 6),
    ), transposed=("batch 9", (9,), 7, 3, 5))


def _kernel_cases(gen) -> list:
    # (rows, n, D, BLOCK_D, dtype, index)
    return kernel_cases(gen, (
        (1, 5, 3, 4, F64, [4]),  # batch 1: one row into the last slot; BLOCK_D > D
        (7, 11, 19, 8, F64, "distinct"),  # three column blocks, distinct destinations
        (7, 3, 10, 4, F64, "repeated"),  # repeats: 7 rows into 3
        (13, 6, 7, 8, F32, "repeated"),  # float32
    ))


def _moe_alternatives(case: Case) -> dict[str, list[Alternative]]:
    """Wrong gradients of the router, built from p, ḡ and p̄: shown only here, they would spell out the derivation."""
    dy, logits, indices, expert_out = case.args
    p = torch.softmax(logits, dim=-1)  # (..., E)
    dg = torch.einsum("...md,...d->...m", expert_out, dy)  # (..., k): ḡ
    dp = torch.zeros_like(p).scatter_add_(-1, indices, dg)  # (..., E): p̄
    chosen = torch.zeros_like(p).scatter_(-1, indices, 1.0)  # (..., E): 1 at the chosen experts
    dlogits, _ = moe_reference(dy, logits, indices, expert_out)
    q = torch.softmax(logits.masked_fill(chosen == 0, float("-inf")), dim=-1)  # renormalised gates, scattered
    renormalised = q * (dp - (q * dp).sum(dim=-1, keepdim=True))
    return {
        "dlogits": [
            Alternative("wrong-values", "dlogits is p̄, the gradient with respect to the probabilities p = softmax(z): "
                        "the softmax between the logits and p still needs its backward.", dp),
            Alternative("wrong-values", "dlogits is p ⊙ p̄: the softmax backward is missing its −s term; every logit "
                        "moves every probability through the normalisation.", p * dp),
            Alternative("wrong-values", "dlogits is zero at the experts that were not chosen: with these gates every "
                        "logit takes probability away from the chosen experts, chosen or not.", dlogits * chosen),
            Alternative("wrong-values", "dlogits is the gradient of renormalised gates (a softmax over the k chosen "
                        "logits, as in GShard's top-2 and Mixtral); this layer's gates are the full softmax's "
                        "probabilities, not renormalised.", renormalised),
        ],
        "dexpert_out": [
            Alternative("wrong-values", "dexpert_out is ȳ copied to each chosen expert: each expert's output was "
                        "multiplied by its gate in the forward.", dy[..., None, :].expand_as(expert_out).clone()),
        ],
    }


topk_backward = hidden(EXERCISES["topk_backward"], _topk_cases)
embedding_backward = hidden(EXERCISES["embedding_backward"], _embedding_cases)
relu_backward = hidden(EXERCISES["relu_backward"], _relu_cases)
maxpool1d_backward = hidden(EXERCISES["maxpool1d_backward"], _maxpool_cases)
dropout_backward = hidden(EXERCISES["dropout_backward"], _dropout_cases)
moe_gate_backward = hidden(EXERCISES["moe_gate_backward"], _moe_cases, _moe_alternatives)
scatter_add_kernel = hidden(SCATTER_ADD, _kernel_cases)

