"""Pick where the course's kernels run, before any kernel is defined (docs/design.md, "The device rule").

Triton reads TRITON_INTERPRET when a function is decorated with ``@triton.jit``, so this must run before a
notebook defines its first kernel. The interpreter's bfloat16 ``tl.dot`` gives garbage (measured): CPU runs
use float32 and float64.
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

    def __str__(self) -> str:
        return self.description


def choose_device() -> DeviceChoice:
    """Return CUDA when a GPU is usable, else the CPU with Triton's interpreter on.

    Setting ``TRITON_INTERPRET=1`` yourself forces the interpreter even on a GPU
    machine (handy for stepping through a kernel with print statements).
    """
    forced = os.environ.get("TRITON_INTERPRET", "") == "1"
    if torch.cuda.is_available() and not forced:
        name = torch.cuda.get_device_name(0)
        return DeviceChoice(torch.device("cuda"), False, f"GPU: {name} — Triton kernels compile for it.")
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
