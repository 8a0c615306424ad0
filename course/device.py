"""Pick where the course's kernels run, before any kernel is defined (docs/design.md, "The device rule").

Triton reads TRITON_INTERPRET when a function is decorated with ``@triton.jit``, so this must run before a
notebook defines its first kernel. The interpreter's bfloat16 ``tl.dot`` gives garbage (measured): CPU runs
use float32 and float64.

On a GPU the banner names it, its compute capability and the shared memory one block may use (what Triton compares
a compiled kernel against before its first launch, ``course.fit``). Before sm_80 (a T4 is sm_75) bfloat16 has no
hardware support and Triton uses no tensor cores: measured with Triton 3.9 for sm_75, a float16 or bfloat16
``tl.dot`` compiles to float32 ``fma`` instructions (no ``mma``), bfloat16 loads widened by integer shifts; older
Tritons could emit bfloat16 conversions that ptxas refuses there. The banner says to use float16 or float32.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DeviceChoice:
    device: torch.device
    interpreted: bool  # True when Triton kernels run in the CPU interpreter
    description: str
    gpu: str = ""  # the GPU's name ("Tesla T4"); empty on the CPU
    arch: str = ""  # "sm_75" (CUDA) or "gfx942" (ROCm); empty on the CPU
    max_shared: int = 0  # bytes of shared memory one block may use; 0 on the CPU
    bfloat16_dot: bool = False  # whether bfloat16 has hardware support here (sm_80 and newer; ROCm's CDNA)

    def __str__(self) -> str:
        return self.description


def choose_device() -> DeviceChoice:
    """Return CUDA when a GPU is usable, else the CPU with Triton's interpreter on.

    Setting ``TRITON_INTERPRET=1`` yourself forces the interpreter even on a GPU
    machine (handy for stepping through a kernel with print statements).
    """
    forced = os.environ.get("TRITON_INTERPRET", "") == "1"
    if torch.cuda.is_available() and not forced:
        return _gpu_choice(torch.cuda.current_device())
    if not forced and "triton.language" in sys.modules:
        # Triton's own library functions (tl.max, tl.sum, tl.zeros, ...) were decorated at its import, for a GPU:
        # inside an interpreted kernel they raise "Cannot call @triton.jit'd outside of the scope of a kernel".
        warnings.warn("triton was imported before course, so Triton's interpreter cannot run tl.max, tl.sum or "
                      "tl.zeros here: restart the kernel and run `import course` before `import triton`.",
                      stacklevel=3)
    os.environ["TRITON_INTERPRET"] = "1"
    # Without CUDA the reason is the missing GPU, whoever set the variable first (``import kernels`` sets it too).
    why = "TRITON_INTERPRET=1 was set" if forced and torch.cuda.is_available() else "no CUDA GPU found"
    return DeviceChoice(
        torch.device("cpu"),
        True,
        f"CPU ({why}) — Triton kernels run in the interpreter; use float16/float32/float64 (bfloat16 needs a GPU).",
    )


def _gpu_choice(index: int) -> DeviceChoice:
    """The GPU at ``index``, described in one line: name, compute capability, shared memory per block."""
    props = torch.cuda.get_device_properties(index)
    hip = getattr(props, "gcnArchName", "") if torch.version.hip else ""
    arch = hip.split(":")[0] if hip else f"sm_{props.major}{props.minor}"
    bf16 = bool(hip) or props.major >= 8
    shared = _max_shared(index, props)
    note = "" if bf16 else (" — before sm_80 Triton's tl.dot runs without tensor cores and bfloat16 has no hardware "
                            "support: use float16 or float32 here")
    return DeviceChoice(
        torch.device("cuda"), False,
        f"cuda:{index} — {props.name}, {arch}, {shared // 1024} KB shared memory per block — Triton kernels compile "
        f"for it{note}.", props.name, arch, shared, bf16)


def _max_shared(index: int, props) -> int:
    """Triton's own limit (the one its launch checks), else PyTorch's opt-in maximum per block."""
    try:
        from triton.runtime import driver  # a GPU: no interpreter to set up first, so importing Triton here is safe

        return int(driver.active.utils.get_device_properties(index)["max_shared_mem"])
    except Exception:  # an older Triton, or a driver it cannot load: PyTorch reads the same attribute
        return int(getattr(props, "shared_memory_per_block_optin", 0) or getattr(props, "shared_memory_per_block", 0))
