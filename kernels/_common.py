"""Host-side helpers every op shares: input checks with clear messages, and row views."""

from __future__ import annotations

import os

import torch

CPU_DTYPES = (torch.float32, torch.float64)
GPU_DTYPES = CPU_DTYPES + (torch.float16, torch.bfloat16)


def interpreted() -> bool:
    """True when Triton runs kernels in its CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def check_floating(name: str, t: torch.Tensor) -> None:
    """Refuse inputs the kernels cannot handle, saying what would work instead."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    allowed = GPU_DTYPES if t.is_cuda else CPU_DTYPES
    if t.dtype not in allowed:
        where = "on the GPU" if t.is_cuda else "on the CPU (Triton's interpreter)"
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise TypeError(f"{name} has dtype {str(t.dtype).removeprefix('torch.')}; {where} use one of: {names}")
    if t.is_cuda is False and not interpreted():
        raise RuntimeError(
            f"{name} is on the CPU but Triton is not in interpreter mode: `import course` first "
            "(or set TRITON_INTERPRET=1 before importing triton), or move the tensor to CUDA"
        )
    if t.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension (the one to normalise over)")
    if t.shape[-1] == 0:
        raise ValueError(f"{name} has an empty last dimension; there is nothing to normalise over")


def rows_view(t: torch.Tensor) -> torch.Tensor:
    """t as a (rows, last dim) matrix whose rows are contiguous, copying only when needed."""
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()
