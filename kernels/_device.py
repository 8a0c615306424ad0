"""Where the reference kernels run, decided once, before any of them is defined (docs/design.md, "The device rule").

Triton reads TRITON_INTERPRET when ``@triton.jit`` decorates a function, so ``kernels/__init__.py``
calls :func:`device_choice` before it imports an op module. The rule is ``course/device.py``'s,
written again here so that ``import kernels`` works on its own: ``course`` is the students'
package and never imports the solutions, and the ops must run without the students' package.

- TRITON_INTERPRET unset (or empty) and no CUDA GPU: set TRITON_INTERPRET=1, so the kernels run on
  CPU tensors in Triton's interpreter (float16, float32 and float64).
- Unset, with a CUDA GPU: change nothing; Triton compiles the kernels for the GPU.
- Set: the user's choice, left as it is. A true value (``1``) runs the interpreter even on a GPU
  machine; ``0`` asks for compiled kernels without a GPU, which is what ``python -m
  kernels.compile_check`` needs (``course`` has no such case: its notebooks must run).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch

# The values Triton reads as true in TRITON_INTERPRET (its getenv_bool), so that this module and
# Triton never disagree on whether a kernel was defined for the interpreter.
TRUE_VALUES = ("1", "true", "yes", "on", "y")


@dataclass(frozen=True)
class DeviceChoice:
    interpreted: bool  # True when the kernels were defined for Triton's CPU interpreter
    why: str  # what decided it, for messages
    chosen_here: bool  # True when this rule switched the interpreter on (no CUDA, nothing set)


@functools.cache
def device_choice() -> DeviceChoice:
    """Apply the rule above once per process and return what it decided; later calls return the same."""
    setting = os.environ.get("TRITON_INTERPRET", "")
    if setting:
        return DeviceChoice(setting.lower() in TRUE_VALUES, f"TRITON_INTERPRET={setting} was set", chosen_here=False)
    if torch.cuda.is_available():
        return DeviceChoice(False, "a CUDA GPU was found", chosen_here=False)
    os.environ["TRITON_INTERPRET"] = "1"
    return DeviceChoice(True, "no CUDA GPU found", chosen_here=True)
