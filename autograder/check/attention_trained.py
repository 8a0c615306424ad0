"""Hidden checks for 10_attention_as_trained: the visible specs (``course.selfcheck.attention_trained``) on sizes
drawn each run (AUTOGRADER_SEED replays a draw): T a multiple of no block, head dims 3 to 20, G of 1 and 4, batch
1 and 2; packed documents in a drawn order, one of a single token, some shorter than a block, one long enough that
a walk past the diagonal shows, so that every boundary falls somewhere inside a tile.
"""

from __future__ import annotations

import torch

from course.selfcheck.attention_trained import (
    DKDV_SPEC,
    DQ_SPEC,
    F32,
    F64,
    FWD_SPEC,
    VARLEN_SPEC,
    causal_cases,
    varlen_cases,
)

from .hidden import hidden


def draw(gen: torch.Generator, low: int, high: int) -> int:
    """A size in [low, high) that no block of 16 or 32 divides."""
    while True:
        n = int(torch.randint(low, high, (1,), generator=gen))
        if n % 16:
            return n


def hidden_causal_cases(gen: torch.Generator) -> list:
    """Batch 1 with G = 1 first, then G = 4 and batch 2, each block pair, float32 and float64, the gradcheck last."""
    return causal_cases(gen, [
        ("batch 1, G = 1", 1, 1, 1, draw(gen, 17, 48), draw(gen, 3, 21), F64, 16, 16),
        ("G = 4, the token axis of stride 1", 1, 4, 1, draw(gen, 33, 70), draw(gen, 3, 21), F64, 32, 16, True),
        ("batch 2, G = 4", 2, 4, 1, draw(gen, 33, 70), draw(gen, 3, 21), F32, 16, 32),
        ("batch 2, G = 1", 2, 2, 2, draw(gen, 17, 60), draw(gen, 3, 21), F64, 16, 16),
        ("gradcheck", 1, 4, 1, draw(gen, 17, 30), draw(gen, 3, 8)),
    ])


def documents(gen: torch.Generator, long_low: int) -> tuple[int, ...]:
    """A 1-token document, two shorter than a block, one longer than two blocks, in a drawn order."""
    lengths = [1, draw(gen, 2, 16), draw(gen, 2, 16), draw(gen, long_low, long_low + 40)]
    return tuple(lengths[i] for i in torch.randperm(4, generator=gen).tolist())


def hidden_varlen_cases(gen: torch.Generator) -> list:
    return varlen_cases(gen, [
        ("G = 1", 2, 2, documents(gen, 33), draw(gen, 3, 21), F64, 16, 16),
        ("G = 4, the token axis of stride 1", 4, 1, documents(gen, 49), draw(gen, 3, 21), F32, 32, 16, True),
        ("G = 4", 4, 1, documents(gen, 65), draw(gen, 3, 21), F64, 16, 32),
    ])


causal_fwd_kernel = hidden(FWD_SPEC, hidden_causal_cases)
causal_bwd_dq_kernel = hidden(DQ_SPEC, hidden_causal_cases)
causal_bwd_dkdv_kernel = hidden(DKDV_SPEC, hidden_causal_cases)
varlen_fwd_kernel = hidden(VARLEN_SPEC, hidden_varlen_cases)
