"""Embedding lookup whose backward is kernels.scatter_add.

Forward: y = W[ids] (a gather). Backward: W̄ = scatter_add(ȳ rows, ids, num_embeddings) —
every occurrence of a token adds its gradient into that token's row, so a token that
appears twice gets twice the contribution. ids are constants: they get no gradient.
"""

from __future__ import annotations

import torch

from .scatter_add import gather_rows, scatter_add


class EmbeddingFunction(torch.autograd.Function):
    """Saves the ids only: the backward needs where each row went, not the table."""

    @staticmethod
    def forward(ctx, weight, ids):
        ctx.save_for_backward(ids)
        ctx.num_embeddings = weight.shape[0]
        return gather_rows(weight, ids)

    @staticmethod
    def backward(ctx, dy):
        (ids,) = ctx.saved_tensors
        dim = dy.shape[-1]
        return scatter_add(dy.reshape(-1, dim), ids.reshape(-1), ctx.num_embeddings), None


def embedding(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """weight[ids], differentiable in weight; matches ``torch.nn.functional.embedding(ids, weight)``."""
    return EmbeddingFunction.apply(weight, ids)
