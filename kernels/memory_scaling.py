"""Extra peak memory of attention's forward+backward against sequence length T, measured on the CPU.

Two attentions over q, k, v of shape (B, H, T, D):

- :func:`saved_p_attention`, plain PyTorch: autograd keeps P = softmax(q kᵀ/√D), (B, H, T, T), for
  the backward, and the backward builds dP and dS of the same size — O(T²);
- :func:`kernels.attention.attention`, which keeps O and L = m + log ℓ and recomputes P tile by
  tile in the backward — O(T·D).

:func:`extra_peak_bytes` runs one forward+backward under :class:`course.peak_memory.PeakMemory`
(a ``TorchDispatchMode`` that adds each new storage's bytes when an op makes it and subtracts
them when it is freed) and returns the highest total: what the pass needed beyond its inputs —
saved tensors, scratch, the output and the gradients. It is the CPU counterpart of
``torch.cuda.max_memory_allocated() - memory_allocated()`` in ``kernels.bench``, and unlike a GPU
count it needs no GPU: the Triton kernels run in the interpreter, slowly but for real.

    rows = measure([256, 512, 1024])      # [{"T": 256, "saved_p": bytes, "recompute": bytes, ...}, ...]

Each row also holds the largest relative error between the two implementations' outputs and
gradients, so a row is only as good as a recompute backward that really ran and agreed.

The interpreter pays per tile, not per element, so ``measure(..., tile=256)`` runs the
recompute kernels on 256×256 tiles instead of their own (32×32 in the interpreter): T = 4096
then takes seconds, not many minutes. The bytes counted are the host code's allocations (O, L,
D, the gradients), which do not depend on the tile size; ``tests/kernels/test_memory_scaling.py``
checks that the count is the same either way.

Limitations: memory made outside torch's dispatcher (the interpreter's NumPy tiles, allocator
overhead) is invisible, so the numbers are tensor bytes, not process RSS. Even with large tiles
the interpreter's time grows as T².
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch

from course.peak_memory import PeakMemory

__all__ = ["extra_peak_bytes", "interpreter_tiles", "loglog_slope", "measure", "saved_p_attention"]


def saved_p_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q kᵀ / √D) v with torch ops; autograd saves P for the backward."""
    s = (q @ k.mT) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    p = torch.softmax(s, dim=-1)  # (B, H, T, T): kept until the backward has run
    return p @ v  # (B, H, T, D)


def recompute_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """kernels.attention: saves O and L only, recomputes P in the backward."""
    from .attention import attention

    return attention(q, k, v)


def extra_peak_bytes(fn: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor):
    """Run ``fn(q, k, v)`` and its backward for the gradient ``do``; return (peak bytes, (o, dq, dk, dv)).

    The peak is the highest total of live tensors made during the pass: the output,
    everything saved for the backward, the backward's scratch and the three gradients. The
    inputs and ``do`` exist before and are not counted.
    """
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    with PeakMemory() as mem:
        out = fn(*leaves)
        grads = torch.autograd.grad(out, leaves, do)
    return mem.peak, (out.detach(), *grads)


@contextmanager
def interpreter_tiles(block: int) -> Iterator[None]:
    """Inside the block, kernels.attention runs on ``block``×``block`` tiles (interpreter only)."""
    from ._common import interpreted

    if not interpreted():
        raise RuntimeError("large tiles are for Triton's CPU interpreter; on a GPU they would not fit in shared memory")
    if block < 16 or block & (block - 1):
        raise ValueError(f"tile {block} must be a power of two ≥ 16 (tl.dot needs it)")
    module = importlib.import_module(".attention", __package__)  # the module, not the function kernels exports
    own = module._blocks

    def tiles(head_dim, dtype):
        return (block, block, own(head_dim, dtype)[2])

    module._blocks = tiles
    try:
        yield
    finally:
        module._blocks = own


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b).clamp_min(1e-300)).item()


def measure(
    seq_lens: Sequence[int],
    head_dim: int = 64,
    batch_heads: tuple[int, int] = (1, 1),
    dtype: torch.dtype = torch.float32,
    tile: int | None = None,
    seed: int = 0,
    progress: Callable[[dict], None] | None = None,
) -> list[dict]:
    """One row per T: ``{"T", "D", "B", "H", "dtype", "saved_p", "recompute", "max_rel_err"}``.

    ``saved_p`` and ``recompute`` are extra peak bytes, each measured once (the peak bytes of
    a deterministic program do not vary between runs); ``max_rel_err`` is the largest relative
    error of the recompute output and gradients against the saved-P ones. ``tile``: see the
    module docstring. ``progress`` is called with each row as it is finished.
    """
    if head_dim < 1 or not seq_lens or any(t < 1 for t in seq_lens):
        raise ValueError(f"sizes must be positive; got T = {list(seq_lens)}, D = {head_dim}")
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for t in seq_lens:
        b, h = batch_heads
        q, k, v, do = (torch.randn(b, h, t, head_dim, generator=gen, dtype=dtype) for _ in range(4))
        row = {"T": t, "D": head_dim, "B": b, "H": h, "dtype": str(dtype).removeprefix("torch.")}
        row["saved_p"], reference = extra_peak_bytes(saved_p_attention, q, k, v, do)
        if tile is None:
            row["recompute"], results = extra_peak_bytes(recompute_attention, q, k, v, do)
        else:
            with interpreter_tiles(tile):
                row["recompute"], results = extra_peak_bytes(recompute_attention, q, k, v, do)
        row["max_rel_err"] = max(_relative_error(x, ref) for x, ref in zip(results, reference))
        del reference, results
        rows.append(row)
        if progress:
            progress(row)
    return rows


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of log y against log x: 1 for linear growth, 2 for quadratic."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError("need at least two (x, y) points")
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)
