"""Host-side helpers every op shares: input checks with clear messages, row views, the target GPU,
and the one block and warp rule of the row kernels (row_launch)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._device import device_choice

# float16 runs in Triton's interpreter as numpy float16: its tl.dot is a numpy matmul into the float32
# accumulator, and every op upcasts to float32 before it reduces (tests/kernels/test_half_precision_backward.py).
CPU_DTYPES = (torch.float32, torch.float64, torch.float16)
GPU_DTYPES = CPU_DTYPES + (torch.bfloat16,)
# numpy has no bfloat16: the interpreter holds it as raw uint16 bits, its tl.dot multiplies those integers
# (attention's output is off by orders of magnitude), its atomic_add refuses them, and its float32 → bfloat16
# cast truncates instead of rounding to nearest. Refused on the CPU, saying why.
CPU_BFLOAT16_REFUSAL = (
    "bfloat16 does not run on the CPU: Triton's interpreter holds it as raw 16-bit integers and its tl.dot "
    "multiplies those integers; use float16 or float32 on the CPU (the kernels accumulate both in float32, as "
    "they do bfloat16 on a GPU), or move the tensors to a CUDA GPU for bfloat16"
)


def interpreted() -> bool:
    """True when the kernels were defined for Triton's CPU interpreter (kernels._device decided it on import).

    Not TRITON_INTERPRET as it is now: ``import course`` after ``kernels`` may set it, and a kernel stays what it was defined as.
    """
    return device_choice().interpreted


def check_floating(name: str, t: torch.Tensor) -> None:
    """Refuse inputs the kernels cannot handle, saying what would work instead."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    allowed = GPU_DTYPES if t.is_cuda else CPU_DTYPES
    if t.dtype == torch.bfloat16 and not t.is_cuda:
        raise TypeError(f"{name} has dtype bfloat16; {CPU_BFLOAT16_REFUSAL}")
    if t.dtype not in allowed:
        where = "on the GPU" if t.is_cuda else "on the CPU (Triton's interpreter)"
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise TypeError(f"{name} has dtype {str(t.dtype).removeprefix('torch.')}; {where} use one of: {names}")
    if t.is_cuda is False and not interpreted():
        raise RuntimeError(
            f"{name} is on the CPU, but the kernels were compiled for a GPU ({device_choice().why} when kernels was "
            f"imported): move {name} to CUDA, or set TRITON_INTERPRET=1 before importing kernels to run them on the CPU "
            "in Triton's interpreter"
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


@dataclass(frozen=True)
class LaunchTarget:
    """The GPU that Triton compiles and launches for: what block sizes and program counts depend on."""

    backend: str  # "cuda" or "hip"
    arch: int | str  # 75, 80, 86, 89, 90 (compute capability) or "gfx942"
    warp_size: int  # 32 (NVIDIA) or 64 (AMD CDNA)
    multiprocessor_count: int  # SMs, or CUs on AMD
    max_shared_mem: int  # bytes of shared memory one program may use


def launch_target() -> LaunchTarget:
    """The target of the next launch, asked of Triton's active driver (as Triton's tutorials do).

    Not torch.cuda: Triton compiles for whatever its active driver reports, so whoever sets
    the driver (``triton.runtime.driver.set_active``; ``python -m kernels.compile_check``
    sets one per GPU it compiles for) also decides the host code's choices.
    """
    from triton.runtime import driver

    active = driver.active
    target = active.get_current_target()
    props = active.utils.get_device_properties(active.get_current_device())
    return LaunchTarget(target.backend, target.arch, target.warp_size, props["multiprocessor_count"], props["max_shared_mem"])


class DoesNotFit(ValueError):
    """A launch the GPU cannot hold (its tiles need more shared memory than a block has), refused before it is
    made, saying what would fit. The compile check reports it as refused, not failed: the refusal is the design."""


def target_name(target: LaunchTarget | None = None) -> str:
    """The name of the launch's GPU in the compile check's table (kernels._target.GPUS), which per-target
    configuration tables are keyed by: gfx942 on AMD; on CUDA by compute capability, 7.x → sm_75 (T4: 64 KB of
    shared memory, no tensor-core tl.dot), 8.6 → sm_86 and 8.9 → sm_89 (99 KB), 9.0 and later → sm_90, the rest
    of 8.x → sm_80 (the A100's 163 KB; 8.7, Jetson Orin, has as much)."""
    target = target or launch_target()
    if target.backend == "hip":
        return "gfx942"
    arch = int(target.arch)
    if arch < 80:
        return "sm_75"
    if arch >= 90:
        return "sm_90"
    return {86: "sm_86", 89: "sm_89"}.get(arch, "sm_80")


def reduction_programs(n_rows: int, device: torch.device) -> int:
    """Programs that share the rows of a backward with a cross-row parameter sum: enough to
    fill the GPU, few enough that the partial buffer and its second pass stay small."""
    if device.type == "cuda":
        target = 4 * launch_target().multiprocessor_count
    else:
        target = 8 if interpreted() else 1
    return max(1, min(n_rows, target))


@dataclass(frozen=True)
class RowLaunch:
    """How a kernel covers a row: BLOCK lanes at a time, the whole row in one block or not, on num_warps warps."""

    block: int  # a power of two
    whole_row: bool  # one block holds the row; otherwise the kernel walks it BLOCK lanes at a time
    num_warps: int


# A kernel that walks a row takes this many lanes a step on a GPU. The interpreter runs a block as
# one numpy array, so there bigger blocks mean fewer Python-level steps.
GPU_LOOP_BLOCK = 4096
INTERPRETER_LOOP_BLOCK = 8192


def looped_block(interpreter_block: int = INTERPRETER_LOOP_BLOCK) -> int:
    """The block of a kernel that walks its rows: GPU_LOOP_BLOCK on a GPU, ``interpreter_block`` in the interpreter."""
    return interpreter_block if interpreted() else GPU_LOOP_BLOCK


def row_launch(n_cols: int, *, whole_row_max: int = 0, loop_block: int | None = None,
               four_warps_max: int | None = None) -> RowLaunch:
    """The one block and warp rule of every row kernel.

    The whole row in one power-of-two block (lanes past n_cols are masked) while that block is at
    most ``whole_row_max`` lanes; past it, blocks of at most ``loop_block`` lanes walked along the row,
    or, without a loop_block, a refusal: that kernel holds whole rows only. Warps: Triton's default 4,
    or, given ``four_warps_max``, 4 up to that many lanes, 8 up to four times as many and 16 beyond,
    so that each thread holds a bounded number of elements.
    """
    import triton

    block = triton.next_power_of_2(n_cols)
    whole_row = block <= whole_row_max
    if not whole_row:
        if loop_block is None:
            raise ValueError(f"rows of {n_cols} elements are longer than the {whole_row_max} this kernel holds in one block")
        block = min(block, loop_block)
    num_warps = 4 if four_warps_max is None or block <= four_warps_max else 8 if block <= 4 * four_warps_max else 16
    return RowLaunch(block, whole_row, num_warps)


_HALF = (torch.float16, torch.bfloat16)


def _autocast_on(tensors) -> str | None:
    """The device type of the first tensor when torch.autocast is on for it, else None."""
    first = next((t for t in tensors if isinstance(t, torch.Tensor)), None)
    return first.device.type if first is not None and torch.is_autocast_enabled(first.device.type) else None


def autocast_to_float32(*tensors, on_cpu: bool = False):
    """The tensors as PyTorch's autocast hands them to an op on its float32 list.

    CUDA's autocast (and every GPU backend's: ATen's AT_FORALL_FP32 and FP32_SET_OPT_DTYPE lists) casts
    float16 and bfloat16 inputs of softmax, layer_norm, rms_norm and cross_entropy to float32, so they compute
    and return float32; float64 and non-float tensors pass unchanged. The CPU's autocast lists leave the first
    three alone (they run in the input's dtype) and cast cross_entropy's: ``on_cpu`` says which. None entries
    pass through.
    """
    device = _autocast_on(tensors)
    if device is None or (device == "cpu" and not on_cpu):
        return tensors
    return tuple(t.float() if isinstance(t, torch.Tensor) and t.dtype in _HALF else t for t in tensors)


def autocast_to_lower(*tensors):
    """The tensors as autocast hands them to an op on its lower-precision list (linear, matmul, scaled dot-product
    attention, on the CPU and on GPUs): float32 and half tensors in the autocast dtype, float64 and non-float
    tensors unchanged, None entries passed through."""
    device = _autocast_on(tensors)
    if device is None:
        return tensors
    dtype = torch.get_autocast_dtype(device)
    return tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype in (torch.float32, *_HALF) else t
                 for t in tensors)
