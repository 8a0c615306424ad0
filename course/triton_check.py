"""What every check of a student's Triton code needs: quiet runs, the student's own error, kernel lookup.

Triton's interpreter runs a kernel with numpy (which warns on NaN and overflow) and wraps
whatever the kernel raises in its own error type; on a GPU a stubbed kernel fails to
compile instead of raising. These helpers turn all of that back into what
``course.diagnose.call_student`` understands: no stderr, the student's exception, and
``NotImplementedError`` for a kernel that still holds ``raise course.todo()``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np
import torch


def device() -> torch.device:
    """Where the kernels run: CUDA when course picked it, else the CPU (Triton's interpreter)."""
    from . import DEVICE

    return DEVICE


@contextmanager
def quiet():
    """Silence warnings while student code runs: nbgrader zeroes a test cell that writes to stderr.

    Triton's interpreter runs kernels with numpy, which warns about NaN and overflow.
    """
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


def innermost(exc: BaseException) -> BaseException:
    """What a kernel itself raised: Triton wraps it in errors of its own."""
    while type(exc).__module__.startswith("triton") and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def unwrapped(fn: Callable) -> Callable:
    """``fn``, except that an error inside a kernel comes out as the student's own exception.

    A kernel still holding its stub raises ``course.todo()`` in the interpreter, and fails to
    compile on a GPU (Triton cannot compile ``raise``): both come out as NotImplementedError,
    which ``call_student`` reports as ``not-implemented``.
    """

    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            inner = innermost(exc)
            if not isinstance(inner, NotImplementedError) and "course.todo()" in str(exc):
                raise NotImplementedError(str(exc)) from None
            if inner is not exc:
                raise inner from None
            raise

    return run


def is_kernel(obj) -> bool:
    """True for a ``@triton.jit`` function (compiled or interpreted)."""
    return hasattr(obj, "__getitem__") and hasattr(obj, "run") and hasattr(obj, "fn")


def namespace_of(obj) -> dict:
    """The global namespace a student's function or class was defined in (the notebook's)."""
    for fn in (getattr(obj, "forward", None), getattr(obj, "backward", None), obj):
        namespace = getattr(fn, "__globals__", None)
        if isinstance(namespace, dict):
            return namespace
    return {}


def pow2_at_least(n: int) -> int:
    """The smallest power of two ≥ n: the width of the block a row is loaded into."""
    return 1 << max(n - 1, 0).bit_length()


def run_student(name: str, fn: Callable, *args, **kwargs):
    """``call_student`` on code that launches kernels: quiet, Triton errors unwrapped, and without
    the autograd guard (the check itself may need autograd around the student's Function)."""
    from .diagnose import call_student

    with quiet():
        return call_student(name, unwrapped(fn), *args, forbid_autograd_use=False, **kwargs)
