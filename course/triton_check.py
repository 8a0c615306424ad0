"""What every check of a student's Triton code or autograd.Function needs: the student's own error, kernels
and Functions looked up and guarded, launches on guarded buffers, and the words for what goes wrong there.

Triton's interpreter runs a kernel with numpy (which warns on NaN and overflow) and wraps
whatever the kernel raises in its own error type; on a GPU a stubbed kernel fails to
compile instead of raising. These helpers turn all of that back into what
``course.diagnose.call_student`` understands: no stderr, the student's exception, and
``NotImplementedError`` for a kernel that still holds ``raise course.todo()``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .autograd_graph import runs_through
from .diagnose import (
    GradingFailure,
    call_student,
    forbid_autograd,
    layout_failure,
    transposed_view,
)
from .memory import AllocationRecorder


def device() -> torch.device:
    """Where the kernels run: CUDA when course picked it, else the CPU (Triton's interpreter)."""
    from . import DEVICE

    return DEVICE


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
    """``call_student`` on code that launches kernels: Triton errors unwrapped, and without the autograd
    guard (the check itself may need autograd around the student's Function)."""
    return call_student(name, unwrapped(fn), *args, forbid_autograd_use=False, **kwargs)


def require_kernel(name: str, kernel, missing: str = "keep the @triton.jit line above its def.") -> None:
    """``error`` unless ``kernel`` is a ``@triton.jit`` function; ``missing`` says what to do about a plain one."""
    if is_kernel(kernel):
        return
    if callable(kernel):
        raise GradingFailure("error", f"{name} is not a Triton kernel: {missing}")
    raise GradingFailure("error", f"{name} is a {type(kernel).__name__}, not a kernel: run the cell that defines it.")


def require_function(name: str, cls) -> None:
    """``error`` unless ``cls`` is a subclass of ``torch.autograd.Function``."""
    if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        raise GradingFailure("error", f"{name} must be a class deriving from torch.autograd.Function (it is a "
                             f"{type(cls).__name__}): run the cell that defines it.")


def relayed(failure: GradingFailure, what: str, part: str, unfinished: str = "not written yet") -> GradingFailure:
    """The failure of a piece ``what`` names ("TritonSoftmax launches softmax_fwd_kernel"), told as the
    failure of the exercise that uses it: its class, and the Part to finish or fix first."""
    if failure.cls == "not-implemented":
        sentence = f"{what}, which is {unfinished}: finish {part} first."
    else:
        sentence = f"{what}, which fails its own check ({part}) — fix it first: {failure.sentence}"
    return GradingFailure(failure.cls, sentence, failure.where)


# ---------------------------------------------------------------------------
# The student's autograd.Function, run with a backward that may not call autograd


def guarded_function(name: str, cls: type, used: list, returned: list | None = None,
                     recorders: list | None = None) -> type:
    """A subclass of the student's Function whose backward may not call autograd: what it tried goes to ``used``.

    ``returned`` keeps what each backward returned before autograd saw it (to diagnose a shape autograd
    would refuse, or sum silently); with ``recorders``, each backward runs under an AllocationRecorder.
    """

    def backward(ctx, *grads):
        with forbid_autograd(f"{name}.backward") as tried:
            try:
                if recorders is None:
                    result = cls.backward(ctx, *grads)
                else:
                    rec = AllocationRecorder(ignore=grads)
                    recorders.append(rec)
                    with rec:
                        result = cls.backward(ctx, *grads)
                if returned is not None:
                    returned.append(result)
                return result
            finally:
                used.extend(tried)

    return type(cls.__name__, (cls,), {"backward": staticmethod(backward), "__module__": cls.__module__})


def autograd_in_backward(name: str, used: list, why: str) -> GradingFailure:
    return GradingFailure("autograd-in-backward", f"{name}.backward called {used[0]}: {why}")


def upstream_layouts(dy: torch.Tensor, shape) -> list[tuple[str, torch.Tensor]]:
    """ȳ contiguous, then (when no axis of ``shape`` is 1) the same values as a transposed view: autograd
    may hand a backward either."""
    return [("contiguous", dy)] + ([("transposed view", transposed_view(dy))] if min(shape) > 1 else [])


def input_leaf(x: torch.Tensor, dtype: torch.dtype, transposed: bool = False) -> torch.Tensor:
    """``x`` on the kernels' device in ``dtype``, requiring grad; ``transposed``: a non-leaf view of a leaf laid
    out column by column (the same values, columns adjacent in memory)."""
    if transposed:
        return x.mT.contiguous().to(device(), dtype).requires_grad_(True).mT
    return x.to(device(), dtype).requires_grad_(True)


def check_wrapper_forward(name: str, failure: GradingFailure | None, label: str, *, transposed: bool, layout: str,
                          x: torch.Tensor, kept: torch.Tensor, in_place: str, y, function: str, library: str) -> None:
    """What a function that runs the kernels through the Function ``function`` must do beside its values (``failure``
    says how those went): be right for a transposed view (``layout`` says why not), leave x as it was (``kept``;
    ``in_place`` says why), and return a result whose autograd graph runs through a custom Function."""
    if failure is not None and transposed and failure.cls != "shape":  # the contiguous cases passed
        raise layout_failure(name, layout, failure.where, bad="a transposed view")
    if failure is not None:
        raise failure
    if not torch.equal(x.detach(), kept):
        raise GradingFailure("wrong-values", f"{name} changed its input x in place: {in_place}", f"inputs: {label}")
    if not runs_through(y):
        raise GradingFailure(
            "wrong-values", f"{name} must run your kernels through {function}.apply, but its result's autograd graph "
            f"holds no custom Function (was it {library}?).", f"inputs: {label}")


# ---------------------------------------------------------------------------
# Launching a kernel on guarded buffers


def unchanged(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` still holds what ``b`` holds, NaN included."""
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def launch(name: str, run: Callable, inputs: dict[str, torch.Tensor]) -> list[str]:
    """Run the student's launch ``run``; return the names of the ``inputs`` buffers it wrote into."""
    before = {k: buf.clone() for k, buf in inputs.items()}
    run_student(name, run)
    if device().type == "cuda":
        torch.cuda.synchronize()
    return [k for k, buf in inputs.items() if not unchanged(buf, before[k])]
