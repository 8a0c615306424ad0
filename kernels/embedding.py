"""Embedding lookup whose backward is kernels.scatter_add.

Forward: y = W[ids] (a gather). Backward: W̄ = scatter_add(ȳ rows, ids, num_embeddings) —
every occurrence of a token adds its gradient into that token's row, so a token that
appears twice gets twice the contribution. ids are constants: they get no gradient.

``padding_idx`` (as in ``torch.nn.functional.embedding``; negative values count from the end): the
forward still reads that row, but it gets no gradient — the scatter skips the ȳ rows of that token
instead of adding them and zeroing the row afterwards, so they are never read.

Autocast: PyTorch's embedding is on no autocast list, so under ``torch.autocast`` the op runs in the
table's dtype, as F.embedding does; nothing is cast.
"""

from __future__ import annotations

import torch

from .scatter_add import gather_rows, scatter_add


class EmbeddingFunction(torch.autograd.Function):
    """Saves the ids only: the backward needs where each row went, not the table."""

    @staticmethod
    def forward(ctx, weight, ids, padding_idx):
        ctx.save_for_backward(ids)
        ctx.num_embeddings = weight.shape[0]
        ctx.padding_idx = padding_idx
        return gather_rows(weight, ids)

    @staticmethod
    def backward(ctx, dy):
        (ids,) = ctx.saved_tensors
        dim = dy.shape[-1]
        return scatter_add(dy.reshape(-1, dim), ids.reshape(-1), ctx.num_embeddings, skip=ctx.padding_idx), None, None


def _padding_row(padding_idx, num_embeddings: int) -> int | None:
    """padding_idx as a row in [0, num_embeddings), negative values counted from the end, as F.embedding does."""
    if padding_idx is None:
        return None
    if isinstance(padding_idx, bool) or not isinstance(padding_idx, int):
        raise TypeError(f"padding_idx must be None or an int, got {padding_idx!r}")
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"padding_idx must be within [-{num_embeddings}, {num_embeddings}) (the table's rows), "
                         f"got {padding_idx}")
    return padding_idx % num_embeddings


def embedding(weight: torch.Tensor, ids: torch.Tensor, padding_idx: int | None = None) -> torch.Tensor:
    """weight[ids], differentiable in weight; matches ``torch.nn.functional.embedding(ids, weight, padding_idx)``."""
    rows = weight.shape[0] if isinstance(weight, torch.Tensor) and weight.ndim else 0
    return EmbeddingFunction.apply(weight, ids, _padding_row(padding_idx, rows))
