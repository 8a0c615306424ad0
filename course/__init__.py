"""Student-side helpers for Backprop for Kernel Writers. ``import course`` comes first in every notebook.

Importing picks where Triton kernels run (CUDA, else the CPU interpreter, set up
before any kernel is defined) and says so in one line: on a GPU its name, compute capability and shared
memory per block. There, a kernel too large for the GPU is explained in one sentence (``course.fit``).
It also offers:

- ``course.gradcheck``: central differences, relative error, ``check_vjp``;
- ``course.diagnose``: the bug classifier behind every check's ``diagnosis:`` line;
- ``course.selfcheck``: the visible checks the notebooks call;
- ``course.plots``: plotting helpers;
- ``course.sanitize()``: races between programs and accesses out of bounds in the Triton kernels launched inside
  a ``with`` block (``course.sanitizer``; every check runs one);
- ``course.shuffled_programs(seed)``: the interpreter runs each launch's programs in a shuffled order, as a GPU
  might, so a result that depends on the order shows it;
- ``course.todo()``: the stub an unfinished exercise raises.

This package holds no solution and imports nothing that does (``kernels``,
``autograder``); students receive it with the release notebooks.
"""

from __future__ import annotations

from .device import DeviceChoice, choose_device

# Decide before anything imports triton.jit: the interpreter flag is read at decoration time.
DEVICE_CHOICE: DeviceChoice = choose_device()
DEVICE = DEVICE_CHOICE.device
INTERPRETED = DEVICE_CHOICE.interpreted

from . import diagnose, fit, gradcheck, plots, selfcheck  # noqa: E402
from .gradcheck import check_vjp, relative_error  # noqa: E402
from .sanitizer import sanitize, shuffled_programs  # noqa: E402
from .stub import ExerciseNotDone, install_short_tracebacks, todo  # noqa: E402

install_short_tracebacks()
if not INTERPRETED:  # only a compiled kernel can need more shared memory or threads than the GPU has
    fit.install()
print(f"course: running on {DEVICE_CHOICE}")

__all__ = [
    "DEVICE", "DEVICE_CHOICE", "INTERPRETED", "ExerciseNotDone", "check_vjp", "diagnose",
    "gradcheck", "plots", "relative_error", "sanitize", "selfcheck", "shuffled_programs", "todo",
]
