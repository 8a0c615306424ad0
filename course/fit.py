"""One sentence, instead of Triton's traceback, when a kernel does not fit the GPU it is launched on (issue 34).

Triton compiles a kernel at its first launch, then, before loading it, compares what the compiled kernel needs with
the GPU (``CompiledKernel._init_handles`` in triton/compiler/compiler.py): more shared memory per block than the
driver's ``max_shared_mem``, or more threads than a block may hold (num_warps × 32), raises
``triton.runtime.errors.OutOfResources(required, limit, name)``, ``name`` being the resource ("shared memory",
"threads", "tensor memory"). It names neither the kernel nor the block sizes: those are in the frames the error
passed through, ``JITFunction.run`` (``self``, the kernel; ``kwargs``, the launch's block sizes, num_warps and
num_stages), which :func:`explain` reads. A bfloat16 kernel that ptxas refuses on a GPU older than sm_80
(``PTXASError``: "Feature '.bf16' requires .target sm_80 or higher", seen with older Tritons; 3.9 compiles
bfloat16 there as float32 arithmetic) gets a sentence too.

``import course`` installs :func:`install`: in IPython a custom exception handler, chained to the one
``course.stub`` installs; elsewhere ``sys.excepthook``. An autotuned kernel skips the configurations that do not
fit; only when every one fails does the error reach the student, and it is explained the same way.
"""

from __future__ import annotations

import sys
import types

KB = 1024


def _gpu() -> tuple[str, str, bool]:
    """(name, arch, bfloat16 hardware) of the GPU ``import course`` found; a generic name without one."""
    choice = getattr(sys.modules.get("course"), "DEVICE_CHOICE", None)
    if choice is None or not choice.gpu:
        return "this GPU", "", True
    return f"this {choice.gpu} ({choice.arch})", choice.arch, choice.bfloat16_dot


def _launch(tb: types.TracebackType | None) -> tuple[str, dict, bool]:
    """The kernel's name, its launch's constexpr values and num_warps/num_stages, and whether its floating-point
    tensors are all float32, read from the frame of ``JITFunction.run`` (``self``, ``args``, ``kwargs``)."""
    name, launch, float32 = "the kernel", {}, False
    while tb is not None:
        frame = tb.tb_frame
        kernel, kwargs = frame.f_locals.get("self"), frame.f_locals.get("kwargs")
        if frame.f_code.co_name == "run" and hasattr(kernel, "params") and isinstance(kwargs, dict):
            name = f"`{getattr(kernel.fn, '__name__', name)}`"  # the innermost launch (an autotuner's inner run) wins
            bound = {**dict(zip([p.name for p in kernel.params], frame.f_locals.get("args", ()))), **kwargs}
            wanted = {p.name for p in kernel.params if p.is_constexpr} | {"num_warps", "num_stages"}
            launch = {k: v for k, v in bound.items() if k in wanted and isinstance(v, int) and not isinstance(v, bool)}
            dtypes = {str(getattr(v, "dtype", "")) for v in bound.values()}
            floats = {d for d in dtypes if "float" in d}
            float32 = floats == {"torch.float32"}  # no half-precision tensor: the inputs themselves are float32
        tb = tb.tb_next
    return name, launch, float32


def _shown(launch: dict) -> str:
    return f" launched with {', '.join(f'{k}={v}' for k, v in launch.items())}" if launch else ""


def _out_of_resources(exc, name: str, launch: dict, float32: bool) -> str:
    gpu, arch, bf16 = _gpu()
    resource = str(getattr(exc, "name", "shared memory"))
    required, limit = int(exc.required), int(exc.limit)
    if resource == "threads":
        return (f"{name}{_shown(launch)} needs {required} threads per program (num_warps × 32) and {gpu} runs at most "
                f"{limit} in one block: launch it with num_warps={max(limit // 32, 1)} or fewer.")
    if resource != "shared memory":
        return f"{name}{_shown(launch)} needs {required} of {resource} and {gpu} has {limit}: launch it with smaller blocks."
    # Triton's shared memory holds the tiles tl.dot reads (times num_stages when a loop is pipelined), so halving a
    # block size or num_stages roughly halves it; float16 tiles take half the room of float32 ones (bfloat16's too,
    # but a GPU before sm_80 has no bfloat16 hardware).
    half = "float16" if not bf16 and arch else "float16 or bfloat16"
    smaller = "smaller blocks (halve BLOCK_M or BLOCK_N, or the block along the row)"
    smaller += f", fewer num_stages, or {half} inputs rather than float32" if float32 else " or fewer num_stages"
    return (f"{name}{_shown(launch)} needs {required / KB:.0f} KB of shared memory per program and {gpu} has "
            f"{limit / KB:.0f} KB per block: launch it with {smaller}.")


def explain(exc: BaseException) -> str | None:
    """The sentence for a launch that does not fit this GPU, or None when ``exc`` is something else."""
    for error in (exc, exc.__cause__, exc.__context__):  # as raised, or wrapped once by a launcher
        kind = type(error).__name__
        if error is None or not type(error).__module__.startswith("triton"):
            continue
        if kind == "OutOfResources":
            return _out_of_resources(error, *_launch(error.__traceback__))
        if kind == "PTXASError" and ".bf16" in str(error):
            return (f"{_launch(error.__traceback__)[0]} uses bfloat16, which {_gpu()[0]} cannot compile (bfloat16 "
                    "arithmetic needs sm_80 or newer): run it in float16 or float32 here.")
    return None


def _exception_types() -> tuple[type, ...]:
    try:
        from triton.runtime.errors import OutOfResources, PTXASError
    except ImportError:  # no Triton (macOS, notebooks 00-02): nothing to explain
        return ()
    return OutOfResources, PTXASError


def install() -> None:
    """Show :func:`explain`'s sentence in place of Triton's traceback, in IPython or at Python's top level."""
    kinds = _exception_types()
    if not kinds:
        return
    try:
        from IPython import get_ipython
    except ImportError:
        get_ipython = None
    shell = get_ipython() if get_ipython is not None else None
    if shell is None:
        _install_excepthook()
        return
    earlier, earlier_kinds = shell.CustomTB, tuple(shell.custom_exceptions)  # course.stub's handler, kept

    def short(self, etype, value, tb, tb_offset=None):
        sentence = explain(value) if issubclass(etype, kinds) else None
        if sentence is None:
            if issubclass(etype, earlier_kinds):
                return earlier(etype, value, tb, tb_offset)
            return self.showtraceback((etype, value, tb), tb_offset=tb_offset)  # a PTXAS error of another kind
        lines = ["\x1b[1;31m✗ kernel does not fit this GPU\x1b[0m", sentence]
        self._showtraceback(etype, value, lines)
        return lines

    shell.set_custom_exc(earlier_kinds + kinds, short)


def _install_excepthook() -> None:
    earlier = sys.excepthook

    def hook(etype, value, tb):
        sentence = explain(value) if value is not None else None
        if sentence is None:
            return earlier(etype, value, tb)
        print(f"{etype.__name__}: {sentence}", file=sys.stderr)

    sys.excepthook = hook
