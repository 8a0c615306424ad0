"""Random inputs for hidden checks: float64, non-degenerate (no ties, so max, top-k and argmax are
unambiguous), from AUTOGRADER_SEED (docs/grading.md, "Seeds"), else a fresh seed from the OS.
"""

from __future__ import annotations

import os

import torch

from .seeds import SEED_ENV

DTYPE = torch.float64


def generator(salt: str = "") -> torch.Generator:
    """A torch.Generator seeded from AUTOGRADER_SEED if set, else from the OS."""
    seed = os.environ.get(SEED_ENV)
    base = int(seed) if seed is not None else int.from_bytes(os.urandom(8), "little")
    return torch.Generator().manual_seed((base + sum(map(ord, salt))) % (2**63))


def randn(gen: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=DTYPE) * scale


def distinct(gen: torch.Generator, *shape: int, gap: float = 1e-3) -> torch.Tensor:
    """Values in a random order whose every pair along the last axis differs by more than ``gap``.

    A shuffled evenly spaced grid with a jitter smaller than its step: no ties, spread about [-2, 2].
    """
    n = shape[-1] if shape else 1
    step = max(4.0 / max(n, 1), 2 * gap)
    ranks = torch.argsort(torch.rand(shape, generator=gen), dim=-1).to(DTYPE)
    jitter = torch.rand(shape, generator=gen, dtype=DTYPE) * (step - gap)
    return (ranks - n / 2) * step + jitter


def randint(gen: torch.Generator, high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=gen, dtype=torch.int64)
