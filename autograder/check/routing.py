"""Hidden checks for 06_topk_routing: random float64 inputs, closed-form references students never see.

The checking flow is the visible check's, from ``course.selfcheck.routing``, so a student who
passed the visible check and fails here reads the same kind of diagnosis. What is hidden is
here: the inputs (fresh each run; AUTOGRADER_SEED replays one), the references (closed forms
built from one-hot matrices, not the scatters a student writes), and the MoE alternatives that
would give the derivation away.

Every scatter check runs its cases without repeated indices first and then with them, and
the repeats always include the last slot (where an off-by-one hides). Inputs have no ties
(``autograder.inputs.distinct``) and ReLU inputs stay away from the kink at 0.

- ``topk_backward``: true top-k at batch 1, 7 and 3-D; then gathers with k > n (repeats certain).
- ``embedding_backward``: distinct ids at batch 1 and 7; repeated ids at batch 1 and 7, 1-D and 3-D.
- ``relu_backward``: batch 1, 7 and 3-D, |x| ≥ 0.01.
- ``maxpool1d_backward``: windows apart (stride ≥ kernel_size, gaps included), then overlapping
  windows where one position is the max of two windows and the last position is a max.
- ``dropout_backward``: p on both sides of 0.5 (where 1/p and 1/(1 − p) coincide), batch 1, 7, 3-D.
- ``moe_gate_backward``: top-1 to top-k = E of 4 to 9 experts, batch 1, 7 and (batch, tokens).
- ``scatter_add_kernel``: one row, distinct rows, repeated rows, 1 to 3 column blocks, float64
  and float32, rows inside padded (strided) buffers; then the kernel must call ``tl.atomic_add``.

Every PyTorch exercise also gets a case whose inputs are transposed (non-contiguous) views.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course.diagnose import Alternative, Case, graded
from course.selfcheck.routing import (  # noqa: F401 — HINTS: course.diagnose.graded reads it from this module
    F32, F64, HINTS, KernelCase, ScatterCase, check_dropout_backward, check_embedding_backward, check_maxpool1d_backward,
    check_moe_gate_backward, check_relu_backward, check_scatter_add_kernel, check_topk_backward, dropout_case,
    embedding_case, keep_mask, maxpool_case, moe_case, relu_case, topk_case,
)

from ..inputs import DTYPE, away_from_zero, distinct, generator, randint, randn

# ---------------------------------------------------------------------------
# References: closed forms, in float64.


def _gather_reference(dy: torch.Tensor, indices: torch.Tensor, n: int) -> torch.Tensor:
    """x̄_j = Σ_m ȳ_m [i_m = j]: the one-hot (…, k, n) weighted by ȳ and summed over m."""
    return (F.one_hot(indices, n).to(dy.dtype) * dy[..., :, None]).sum(dim=-2)


def _embedding_reference(dy: torch.Tensor, ids: torch.Tensor, num_embeddings: int) -> torch.Tensor:
    """W̄ = onehot(ids)ᵀ ȳ over every lookup: (num_embeddings, R) @ (R, D)."""
    D = dy.shape[-1]
    return F.one_hot(ids.reshape(-1), num_embeddings).to(dy.dtype).T @ dy.reshape(-1, D)


def _relu_reference(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, dy, torch.zeros_like(dy))


def _window_maxima(x: torch.Tensor, kernel_size: int, stride: int) -> torch.Tensor:
    """a_j = j·s + argmax of window j, window by window: (..., L_out)."""
    L_out = (x.shape[-1] - kernel_size) // stride + 1
    return torch.stack([x[..., j * stride: j * stride + kernel_size].argmax(dim=-1) + j * stride for j in range(L_out)], dim=-1)


def _maxpool_reference(dy, x, kernel_size, stride):
    return _gather_reference(dy, _window_maxima(x, kernel_size, stride), x.shape[-1])


def _dropout_reference(dy, mask, p):
    return torch.where(mask, dy / (1 - p), torch.zeros_like(dy))


def _moe_parts(dy, logits, indices, expert_out):
    """p, the gates g, ḡ, and p̄ of the layer y = Σ_m g_m h_m, g = softmax(z)[i]."""
    E = logits.shape[-1]
    p = torch.softmax(logits, dim=-1)  # (..., E)
    onehot = F.one_hot(indices, E).to(p.dtype)  # (..., k, E)
    g = (onehot * p[..., None, :]).sum(dim=-1)  # (..., k)
    dg = torch.einsum("...md,...d->...m", expert_out, dy)  # (..., k)
    dp = (onehot * dg[..., :, None]).sum(dim=-2)  # (..., E)
    return p, g, dg, dp, onehot


def _moe_reference(dy, logits, indices, expert_out):
    p, g, _, dp, _ = _moe_parts(dy, logits, indices, expert_out)
    dlogits = p * dp - p * (p * dp).sum(dim=-1, keepdim=True)
    return dlogits, g[..., :, None] * dy[..., None, :]


def _moe_alternatives(case: Case) -> dict[str, list[Alternative]]:
    dy, logits, indices, expert_out = case.args
    p, g, dg, dp, onehot = _moe_parts(dy, logits, indices, expert_out)
    dlogits, _ = _moe_reference(dy, logits, indices, expert_out)
    chosen = onehot.sum(dim=-2)  # (..., E): 1 at the chosen experts
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


def _index_add_reference(src: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    return F.one_hot(index, n).to(DTYPE).T @ src.to(DTYPE)


# ---------------------------------------------------------------------------
# Inputs


def _last_slot_twice(indices: torch.Tensor, n: int) -> torch.Tensor:
    """Put the last slot n − 1 at the first and last position of every row: repeated, at the edge."""
    indices = indices.clone()
    indices[..., 0] = indices[..., -1] = n - 1
    return indices


def _topk_cases(gen) -> list[ScatterCase]:
    cases = []
    for label, lead, n, k in (("batch 1", (1,), 11, 4), ("batch 7", (7,), 13, 5), ("3-D", (2, 5), 9, 3)):
        x = distinct(gen, *lead, n)
        x[(0,) * len(lead) + (n - 1,)] = 10.0  # the last slot is chosen in the first row
        cases.append(topk_case(label, randn(gen, *lead, k), x.topk(k, dim=-1).indices, n, False))
    x = distinct(gen, 9, 11)
    cases.append(topk_case("batch 9", randn(gen, 9, 4), x.topk(4, dim=-1).indices, 11, False, transposed=True))
    for label, lead, n, k in (("batch 1", (1,), 7, 9), ("batch 7", (7,), 6, 10), ("3-D", (3, 2), 5, 7)):
        indices = _last_slot_twice(randint(gen, n, *lead, k), n)  # k > n: repeats in every row
        cases.append(topk_case(label, randn(gen, *lead, k), indices, n, True))
    return cases


def _embedding_cases(gen) -> list[ScatterCase]:
    D = 3 + int(randint(gen, 5))  # 3 … 7
    one = torch.cat([torch.randperm(12, generator=gen)[:5], torch.tensor([12])])  # 12: the last row of the table
    seven = torch.cat([torch.randperm(40, generator=gen)[:34], torch.tensor([40])])  # distinct, 40 the last row
    cases = [
        embedding_case("batch 1", randn(gen, 1, 6, D), one.reshape(1, 6), 13),
        embedding_case("batch 7", randn(gen, 7, 5, D), seven.reshape(7, 5), 41),
        embedding_case("batch 5", randn(gen, 5, 3, D), torch.randperm(19, generator=gen)[:15].reshape(5, 3), 19,
                       transposed=True),
    ]
    for label, shape, num in (("batch 1", (1, 9), 5), ("batch 7", (7, 6), 11), ("1-D ids", (13,), 6), ("3-D ids", (2, 3, 5), 9)):
        ids = randint(gen, num, *shape)
        ids.view(-1)[0] = ids.view(-1)[-1] = num - 1  # the last row, read twice
        cases.append(embedding_case(label, randn(gen, *shape, D), ids, num))
    return cases


def _pool_input(gen, lead: tuple[int, ...], L: int, kernel_size: int, stride: int, share: bool) -> torch.Tensor:
    """Tie-free rows whose last position is the max of the last window; with ``share``, one position
    (kernel_size − 1, inside windows 0 and 1) is the max of both."""
    x = distinct(gen, *lead, L)
    top = x.max().item()
    x[..., L - 1] = top + 2.0
    if share:
        x[..., kernel_size - 1] = top + 1.0
    return x


def _maxpool_cases(gen) -> list[ScatterCase]:
    cases = []
    shapes = (
        # (label, lead, L, kernel_size, stride, overlapping); (L − K) % s == 0, so the last window ends at L − 1
        ("batch 1", (1,), 12, 3, 3, False),
        ("batch 7", (7,), 14, 2, 3, False),  # stride > kernel_size: positions no window reads get 0
        ("3-D", (2, 3), 10, 5, 5, False),
        ("batch 9", (9,), 12, 4, 4, False),  # then laid out transposed (non-contiguous)
        ("batch 1", (1,), 11, 3, 1, True),
        ("batch 7", (7,), 14, 4, 2, True),
        ("3-D", (2, 3), 14, 5, 3, True),
    )
    for label, lead, L, K, s, share in shapes:
        x = _pool_input(gen, lead, L, K, s, share)
        L_out = (L - K) // s + 1
        cases.append(maxpool_case(label, randn(gen, *lead, L_out), x, K, s, repeats=share,
                                  transposed=label == "batch 9"))
    return cases


def _uniform(gen, lo: float, hi: float) -> float:
    return lo + (hi - lo) * torch.rand((), generator=gen, dtype=DTYPE).item()


# ---------------------------------------------------------------------------
# The checks


@graded
def topk_backward(fn) -> None:
    check_topk_backward(fn, _topk_cases(generator("topk_backward")), reference=_gather_reference)


@graded
def embedding_backward(fn) -> None:
    check_embedding_backward(fn, _embedding_cases(generator("embedding_backward")), reference=_embedding_reference)


@graded
def relu_backward(fn) -> None:
    gen = generator("relu_backward")
    cases = [relu_case(label, randn(gen, *shape), away_from_zero(gen, *shape))
             for label, shape in (("batch 1", (1, 9)), ("batch 7", (7, 13)), ("3-D", (3, 5, 7)))]
    cases.append(relu_case("batch 9", randn(gen, 9, 11), away_from_zero(gen, 9, 11), transposed=True))
    check_relu_backward(fn, cases, reference=_relu_reference)


@graded
def maxpool1d_backward(fn) -> None:
    check_maxpool1d_backward(fn, _maxpool_cases(generator("maxpool1d_backward")), reference=_maxpool_reference)


@graded
def dropout_backward(fn) -> None:
    gen = generator("dropout_backward")
    cases = []
    # Batch 1 is long enough that a freshly drawn mask cannot match the forward's by luck (then a
    # failure at batch 7 would read as a missing batch reduction).
    for label, shape, (lo, hi) in (("batch 1", (1, 23), (0.25, 0.4)), ("batch 7", (7, 9), (0.55, 0.8)),
                                   ("3-D", (3, 4, 5), (0.2, 0.45))):
        p = round(_uniform(gen, lo, hi), 3)
        cases.append(dropout_case(label, randn(gen, *shape), keep_mask(gen, p, *shape), p))
    p = round(_uniform(gen, 0.2, 0.8), 3)
    cases.append(dropout_case("batch 9", randn(gen, 9, 10), keep_mask(gen, p, 9, 10), p, transposed=True))
    check_dropout_backward(fn, cases, reference=_dropout_reference)


@graded
def moe_gate_backward(fn) -> None:
    gen = generator("moe_gate_backward")
    cases = [
        moe_case("batch 1", gen, (1,), 7, 2, 5),
        moe_case("batch 7", gen, (7,), 6, 3, 4),
        moe_case("batch 7", gen, (7,), 5, 1, 3),  # top-1
        moe_case("batch 7", gen, (7,), 4, 4, 2),  # every expert chosen: the gates sum to 1
        moe_case("3-D (batch, tokens)", gen, (2, 5), 9, 2, 6),
        moe_case("batch 9", gen, (9,), 7, 3, 5, transposed=True),
    ]
    check_moe_gate_backward(fn, cases, reference=_moe_reference, alternatives=_moe_alternatives)


@graded
def scatter_add_kernel(kernel) -> None:
    gen = generator("scatter_add_kernel")

    def case(rows, n, D, block, dtype=F64, index=None):
        index = randint(gen, n, rows) if index is None else index
        return KernelCase(randn(gen, rows, D), index, n, block, dtype)

    distinct_rows = torch.cat([torch.randperm(10, generator=gen)[:6], torch.tensor([10])])  # 10: the last output row
    repeated = _last_slot_twice(randint(gen, 3, 7), 3)
    repeated32 = _last_slot_twice(randint(gen, 6, 13), 6)
    cases = [
        case(1, 5, 3, 4, index=torch.tensor([4])),  # batch 1: one row into the last slot; BLOCK_D > D
        case(7, 11, 19, 8, index=distinct_rows),  # three column blocks, distinct destinations
        case(7, 3, 10, 4, index=repeated),  # repeats: 7 rows into 3
        case(13, 6, 7, 8, F32, index=repeated32),  # float32
    ]
    check_scatter_add_kernel(kernel, cases, reference=_index_add_reference)


__all__ = [
    "topk_backward", "embedding_backward", "relu_backward", "maxpool1d_backward", "dropout_backward",
    "moe_gate_backward", "scatter_add_kernel",
]
