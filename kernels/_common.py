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


def acc_dtype(dtype: torch.dtype):
    """Triton accumulation dtype: float64 for float64 inputs (gradcheck needs it), float32 otherwise."""
    import triton.language as tl

    return tl.float64 if dtype == torch.float64 else tl.float32


def acc_torch_dtype(dtype: torch.dtype) -> torch.dtype:
    """The torch dtype of per-row statistics and partial sums: float64 for float64, float32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_param(x: torch.Tensor, name: str, p: torch.Tensor | None) -> None:
    """A per-feature parameter must be a vector as long as x's last dimension, on x's device."""
    if p is None:
        return
    if not isinstance(p, torch.Tensor) or tuple(p.shape) != (x.shape[-1],):
        shape = tuple(p.shape) if isinstance(p, torch.Tensor) else type(p).__name__
        raise ValueError(f"{name} must have shape ({x.shape[-1]},), the size of x's last dimension; got {shape}")
    if p.device != x.device:
        raise ValueError(f"{name} is on {p.device} but x is on {x.device}")


def reduction_programs(n_rows: int, device: torch.device) -> int:
    """Programs that share the rows of a backward with a cross-row parameter sum: enough to
    fill the GPU, few enough that the partial buffer and its second pass stay small."""
    if device.type == "cuda":
        target = 4 * torch.cuda.get_device_properties(device).multi_processor_count
    else:
        target = 8 if interpreted() else 1
    return max(1, min(n_rows, target))


# Normalisation kernels hold a whole row in one block, up to this many elements.
MAX_ROW_BLOCK = 16384


def row_block(n_cols: int) -> int:
    """The power-of-two block that holds a whole row (lanes past n_cols are masked)."""
    import triton

    if n_cols > MAX_ROW_BLOCK:
        raise ValueError(f"rows of {n_cols} elements are longer than the {MAX_ROW_BLOCK} this kernel holds in one block")
    return triton.next_power_of_2(n_cols)


def row_num_warps(block: int) -> int:
    """More warps for longer rows, so each thread holds a bounded number of elements."""
    return 4 if block <= 1024 else 8 if block <= 4096 else 16
