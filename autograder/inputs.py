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
    """Values in a random order whose every pair along the last axis differs by more than ``gap``: a shuffled evenly
    spaced grid with a jitter smaller than its step, spread about [-2, 2]."""
    n = shape[-1] if shape else 1
    step = max(4.0 / max(n, 1), 2 * gap)
    ranks = torch.argsort(torch.rand(shape, generator=gen), dim=-1).to(DTYPE)
    jitter = torch.rand(shape, generator=gen, dtype=DTYPE) * (step - gap)
    return (ranks - n / 2) * step + jitter


# ---------------------------------------------------------------------------
# Families of activations. A check that always draws the same kind of values (say ȳ = 32 + N(0, 1)) can be
# recognized by a submission, which may then be right only there. So a check draws each case from a family the seed
# picks, ordinary N(0, 1) values among them, and every family must keep what the check looks for visible at its bound
# (docs/grading.md, "Seeds").

FAMILIES = ("normal", "shifted", "heavy", "outliers")
HEAVY_MAX = 64.0  # heavy tails cut here (about one value in 10^5 beyond): a check's scalings then stay in float16's range


def family_order(gen: torch.Generator, k: int) -> list[str]:
    """A family for each of ``k`` cases: every family once before any repeats, in an order drawn from ``gen`` — so a
    run of at least ``len(FAMILIES)`` cases meets them all, and which case gets which changes with the seed."""
    order: list[str] = []
    while len(order) < k:
        order += [FAMILIES[i] for i in torch.randperm(len(FAMILIES), generator=gen).tolist()]
    return order[:k]


def uniform(gen: torch.Generator, low: float, high: float, *shape: int) -> torch.Tensor:
    return low + (high - low) * torch.rand(shape, generator=gen, dtype=DTYPE)


def signs(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """±1, each with probability 1/2."""
    return torch.randint(0, 2, shape, generator=gen).to(DTYPE) * 2 - 1


def row_offsets(gen: torch.Generator, *shape: int, low: float, high: float) -> torch.Tensor:
    """One offset per row (a trailing axis of 1) of random sign and size in [low, high): a common part that differs
    between rows, so that the tensor's own mean does not give it away."""
    return signs(gen, *shape[:-1], 1) * uniform(gen, low, high, *shape[:-1], 1)


def activations(gen: torch.Generator, family: str, *shape: int, offset: tuple[float, float] = (4.0, 16.0)
                ) -> torch.Tensor:
    """Values of ``family`` (docs/grading.md, "Families of inputs") with a spread of about 1 along the last axis;
    ``offset``: the range of ``shifted``'s common part per row."""
    values = torch.randn(shape, generator=gen, dtype=DTYPE)
    if family == "normal":
        return values
    if family == "shifted":
        return values + row_offsets(gen, *shape, low=offset[0], high=offset[1])
    if family == "heavy":
        chi2 = (torch.randn((3, *shape), generator=gen, dtype=DTYPE) ** 2).sum(0)
        return (values / torch.sqrt(chi2 / 3)).clamp(-HEAVY_MAX, HEAVY_MAX)
    if family == "outliers":
        n = shape[-1]
        columns = torch.randperm(n, generator=gen)[: max(1, n // 64)]
        values[..., columns] *= uniform(gen, 20.0, 60.0, len(columns))
        return values
    raise ValueError(f"no family of activations named {family!r}; the families are {', '.join(FAMILIES)}")
