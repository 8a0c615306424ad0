"""Run the real host code for a GPU that is not here, compiling every launch ahead of time.

``compiling_for(gpu)`` makes three things true while it is active:

- Triton's active driver is a stand-in for ``gpu`` (``triton.runtime.driver.set_active``): it reports
  that GPU's target, so every kernel is compiled for it, and its properties, so
  ``kernels._common.launch_target()`` answers for it when the host code picks programs or blocks.
- The host code gets tensors that say they are on CUDA and hold no memory (PyTorch's fake
  tensors): a 4 GB activation costs nothing. Nothing is read back from the device: a value the
  host asks for (``int(t.max())``, ``bool(mask.any())``) reads 0, and a boolean-mask selection
  selects nothing, so the host's checks of index ranges pass. No autograd: it would need a CUDA
  build of PyTorch, so callers use the host functions (or an autograd.Function's forward and
  backward) directly.
- A launch ``kernel[grid](...)`` compiles the kernel for the arguments, block sizes, num_warps and
  num_stages the host code chose (``JITFunction.run`` with ``warmup=True``) and records a
  ``Launch``; it never runs. An autotuned kernel compiles every config that survives its pruning,
  since a GPU may pick any of them. A kernel that does not compile is recorded, not raised.

The GPUs are those of ``GPUS``, with the limits a launch must fit.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass

import torch
from triton.backends.compiler import GPUTarget
from triton.runtime.autotuner import Autotuner
from triton.runtime.driver import driver
from triton.runtime.jit import JITFunction


@dataclass(frozen=True)
class Gpu:
    """A compile target and the limits of the GPU it stands for (CUDA: per SM; HIP: per CU)."""

    name: str  # how the check names the target: "sm_75", "sm_86", "sm_89", "sm_80", "sm_90", "gfx942"
    device: str  # the GPUs of this target; the host code is given the first one's multiprocessor count
    target: GPUTarget
    multiprocessor_count: int
    max_shared_per_block: int  # bytes of shared memory (LDS) one block may use; a launch above it fails
    shared_per_multiprocessor: int  # bytes, shared by the resident blocks
    shared_reserved_per_block: int  # bytes the hardware keeps per block (1 KB from sm_80 on, none on sm_75)
    registers: int  # CUDA: 32-bit registers per SM; HIP: VGPRs (arch + acc) per lane of a SIMD
    max_warps: int  # CUDA: resident warps per SM; HIP: resident waves per SIMD
    max_blocks: int  # resident blocks per SM (CU)


# The limits are the CUDA C Programming Guide's per-compute-capability table (shared memory per block and per
# SM, resident warps and blocks per SM) and AMD's CDNA 3 ISA guide; the multiprocessor counts are the first
# named GPU's (T4 40, RTX 3090 82 — an A10 has 72 —, L4 58 — an RTX 4090 has 128). The GPUs students have come
# first: a T4 (Colab's free GPU; no bfloat16 units, no tensor-core path in Triton: its tl.dot runs on FMAs),
# consumer and small data-centre Ampere and Ada (99 KB of shared memory per block, 48 warps per SM).
GPUS = {
    gpu.name: gpu
    for gpu in (
        Gpu("sm_75", "T4", GPUTarget("cuda", 75, 32), 40, 65536, 65536, 0, 65536, 32, 16),
        Gpu("sm_86", "RTX 3090 / A10", GPUTarget("cuda", 86, 32), 82, 101376, 102400, 1024, 65536, 48, 16),
        Gpu("sm_89", "L4 / RTX 4090", GPUTarget("cuda", 89, 32), 58, 101376, 102400, 1024, 65536, 48, 24),
        Gpu("sm_80", "A100", GPUTarget("cuda", 80, 32), 108, 166912, 167936, 1024, 65536, 64, 32),
        Gpu("sm_90", "H100/H200 SXM", GPUTarget("cuda", 90, 32), 132, 232448, 233472, 1024, 65536, 64, 32),
        Gpu("sm_75", "T4", GPUTarget("cuda", 75, 32), 40, 65536, 65536, 0, 65536, 32, 16),
        Gpu("sm_86", "RTX 3090 / A10", GPUTarget("cuda", 86, 32), 82, 101376, 102400, 1024, 65536, 48, 16),
        Gpu("sm_89", "L4 / RTX 4090", GPUTarget("cuda", 89, 32), 58, 101376, 102400, 1024, 65536, 48, 24),
        Gpu("gfx942", "MI300X", GPUTarget("hip", "gfx942", 64), 304, 65536, 65536, 0, 512, 8, 32),
    )
}


@dataclass(frozen=True)
class TensorArg:
    """What a kernel is told about a tensor argument: enough to bound the offsets it can form."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorArg:
        return cls(t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset())

    @property
    def largest_offset(self) -> int:
        """The largest element offset from the allocation's start that lies inside the tensor."""
        if 0 in self.shape:
            return 0
        return self.storage_offset + sum((size - 1) * abs(stride) for size, stride in zip(self.shape, self.stride))


@dataclass
class Launch:
    """One kernel launch the host code made, compiled instead of run."""

    kernel: str
    grid: tuple
    tensors: dict[str, TensorArg]  # by parameter name
    constexprs: dict[str, object]  # block sizes and flags, by parameter name
    compiled: object | None  # triton.compiler.CompiledKernel, or None when it did not compile
    error: str | None = None


class _Properties:
    """``driver.active.utils`` of the stand-in driver: the device properties Triton's tutorials read."""

    def __init__(self, gpu: Gpu):
        self.gpu = gpu

    def get_device_properties(self, device) -> dict[str, int]:
        g = self.gpu
        return {"max_shared_mem": g.max_shared_per_block, "multiprocessor_count": g.multiprocessor_count,
                "warpSize": g.target.warp_size}


class TargetDriver:
    """A Triton driver for a GPU that is not here: it names the target and its properties, and cannot launch."""

    def __init__(self, gpu: Gpu):
        self.gpu = gpu
        self.utils = _Properties(gpu)

    def get_current_target(self) -> GPUTarget:
        return self.gpu.target

    def get_current_device(self) -> str:
        return self.gpu.name  # Triton keeps one kernel cache per device: one per target here

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cuda")


class _Pointer:
    """What Triton needs of a tensor to specialise a kernel: its dtype and its address's alignment.

    Allocations are 256-byte aligned on a GPU, so the address is taken as the view's byte offset.
    """

    def __init__(self, t: torch.Tensor):
        self.dtype = t.dtype
        self._offset = t.storage_offset() * t.element_size()

    def data_ptr(self) -> int:
        return self._offset


_READS = {torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.__index__,
          torch.Tensor.item, torch.Tensor.tolist}


class _NothingReadBack(torch.overrides.TorchFunctionMode):
    """Device memory is never read by the host: a read-back is 0, a boolean-mask selection is empty."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _READS:
            return False if func is torch.Tensor.__bool__ else [] if func is torch.Tensor.tolist else 0
        if func is torch.Tensor.__getitem__:
            x, index = args
            if isinstance(index, torch.Tensor) and index.dtype == torch.bool:
                return x.new_empty((0, *x.shape[index.ndim:]))
        return func(*args, **kwargs)


def _short_error(exc: BaseException) -> str:
    """The line of a compiler error that says what went wrong (Triton puts it last, after the source)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip() and not line.strip().startswith("^")]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:160]


@contextlib.contextmanager
def compiling_for(gpu: Gpu):
    """Within this block, kernel launches compile for ``gpu`` and are appended to the yielded list."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    launches: list[Launch] = []
    original_run, original_autotune = JITFunction.run, Autotuner.run

    def compile_instead(self, *args, grid, warmup, **kwargs):
        names = [p.name for p in self.params]
        bound = {**dict(zip(names, args)), **{k: v for k, v in kwargs.items() if k in names}}
        constexprs = {p.name: bound.get(p.name, p.default) for p in self.params if p.is_constexpr}
        tensors = {k: TensorArg.of(v) for k, v in bound.items() if isinstance(v, torch.Tensor)}
        stand_in = lambda v: _Pointer(v) if isinstance(v, torch.Tensor) else v  # noqa: E731
        compiled, error = None, None
        try:
            compiled = original_run(self, *map(stand_in, args), grid=grid, warmup=True,
                                    **{k: stand_in(v) for k, v in kwargs.items()})
        except Exception as exc:  # a kernel that does not compile is a finding, not a crash of the check
            error = _short_error(exc)
        if callable(grid):
            grid = grid({**bound, **constexprs})
        launches.append(Launch(self.fn.__name__, tuple(grid), tensors, constexprs, compiled, error))
        return compiled

    def compile_every_config(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        try:
            for config in self.prune_configs(kwargs):
                self.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            self.nargs = None

    previous = getattr(driver, "_active", None)  # DriverConfig has no public getter that does not create one
    driver.set_active(TargetDriver(gpu))
    JITFunction.run, Autotuner.run = compile_instead, compile_every_config
    try:
        with warnings.catch_warnings(), FakeTensorMode(), _NothingReadBack(), torch.no_grad():
            warnings.simplefilter("ignore")  # fake tensors warn about everything a compile check does on purpose
            yield launches
    finally:
        JITFunction.run, Autotuner.run = original_run, original_autotune
        driver._active = previous
