"""Catch an answer that came from a helper the course ships instead of the student's derivation.

``course`` has to hold working code (central differences, the relative error, closed forms behind the checks'
inputs) that notebook 00 asks students to write: ``numerical_gradient = lambda f, x, eps=1e-6:
course.gradcheck.central_difference_grad(f, x, eps)`` is right in every value, and
``course.gradcheck.numerical_vjp`` answers every VJP exercise. So while a check runs a student's function
(``course.diagnose.call_student``), every public function and public method of a public class defined in
``course`` (and in ``kernels``, the reference solutions, when loaded) is a tripwire: calling one is recorded
and raises, and the check reports ``delegated-to-helper``.

Each guarded function keeps its identity (so a reference taken before the check, ``from course.gradcheck import
numerical_vjp``, is caught too), its signature and its source, but gets a new ``__code__`` that calls
:func:`_enter`, which runs the original unless a check is armed. Functions with closures (decorator wrappers
such as the checks) cannot take a closure-free code object and are left alone: none computes an answer.
Private names and dunders are not guarded (the checking machinery runs them while student code is on the
stack: a probe's ``__call__``, a dispatch mode's hooks), nor :data:`EXEMPT` and this module. A student who
restores the original code objects is tampering, not delegating: the trusted re-check's business.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from . import witness

PACKAGES = ("course", "kernels")

# Public functions that run while a student's code is on the stack, by design.
EXEMPT: dict[str, str] = {
    "course.stub.todo": "the stub every unfinished exercise raises (it names its caller's frame)",
    "course.triton_check.innermost": "unwraps the error a student's kernel raised, inside the student's call",
    "course.diagnose.graded": "decorates each check when a check module is imported, which may happen inside a call",
    "course.witness.report": "the trusted re-check reports what the worker measured while the student's call runs",
    "course.witness.Measurement.elements": "the checks' instruments read a measurement inside the student's call",
    "course.witness.is_library_backward": "the autograd guard reads a measurement inside the student's call",
    "course.memory.tensors_in": "the memory probes walk each op's arguments inside the student's call",
    "course.witness.followed": "the trusted re-check asks which token rows to follow while the student's call runs",
    "course.witness.counting_pages": "the trusted re-check asks whether to count a call's memory as the call starts",
    "course.witness.counted_by_os": "a memory rule marks its large cases as the student's call starts",
    "course.witness.loads_asked": "the trusted re-check asks whether to send a call's loads as the call starts",
    "course.witness.large_enough": "a memory rule tells its large cases as the student's call starts",
    # A student may sanitize a launch inside the function a check runs (course.sanitize()) and read the report there:
    # it says what went wrong, never what the answer is.
    "course.sanitizer.Finding.sentence": "a sanitizer report read inside the student's own call",
    "course.sanitizer.Finding.record": "a sanitizer report read inside the student's own call",
    "course.sanitizer.Report.failure": "a sanitizer report read inside the student's own call",
    "course.sanitizer.Report.plot": "a sanitizer report drawn inside the student's own call",
    "course.sanitizer.read_record": "the trusted re-check reads the worker's sanitizer report while the student's "
                                    "call runs",
    "course.sanitizer.read_loads": "the trusted re-check reads the loads the worker measured while the student's "
                                   "call runs",
    "course.sanitizer.Launch.loads": "the grader's worker reports a launch's loads as it ends, inside the student's "
                                     "call",
}

_GUARD = "__course_delegation_guard__"  # the name the trampolines call, in each guarded module's globals


class DelegatedToHelper(RuntimeError):
    """Raised inside student code that called a guarded helper while a check ran it."""


_originals: dict[str, types.FunctionType] = {}  # key -> an untouched copy of the function
_functions: dict[str, types.FunctionType] = {}  # key -> the guarded function itself
_guarded_ids: set[int] = set()
_seen_modules: set[str] = set()
_armed: list[list[str]] = []  # one record per active check; a trip is written into each


def _enter(key: str, args: tuple, kwargs: dict):
    if _armed:
        for record in _armed:
            record.append(key)
        raise DelegatedToHelper(f"{key} is a course helper: a check's answer must not come from it")
    return _originals[key](*args, **kwargs)


def _trampoline(code: types.CodeType, key: str) -> types.CodeType:
    """A closure-free code object that calls ``_enter(key, args, kwargs)``, named and placed like ``code``."""
    source = f"def {code.co_name}(*args, **kwargs):\n    return {_GUARD}({key!r}, args, kwargs)\n"
    module = compile(source, code.co_filename, "exec")
    tramp = next(c for c in module.co_consts if isinstance(c, types.CodeType))
    tramp = tramp.replace(co_firstlineno=code.co_firstlineno)
    if sys.version_info >= (3, 11):  # co_qualname is new in 3.11; students may run 3.10
        tramp = tramp.replace(co_qualname=code.co_qualname)
    return tramp


def _guard(fn: types.FunctionType, key: str) -> None:
    if id(fn) in _guarded_ids or fn.__code__.co_freevars or key in EXEMPT:
        return
    original = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    original.__kwdefaults__ = fn.__kwdefaults__
    original.__qualname__ = fn.__qualname__
    original.__doc__ = fn.__doc__
    try:
        fn.__signature__ = inspect.signature(fn)  # keep help() and tab completion honest
    except (TypeError, ValueError):
        pass
    fn.__globals__[_GUARD] = _enter
    _originals[key] = original
    _functions[key] = fn
    fn.__code__ = _trampoline(fn.__code__, key)
    _guarded_ids.add(id(fn))


def _defined_in(obj, folder: str) -> bool:
    code = getattr(obj, "__code__", None)
    return isinstance(code, types.CodeType) and str(Path(code.co_filename).resolve()).startswith(folder)


def helpers(module: types.ModuleType, folder: str) -> Iterator[tuple[str, types.FunctionType]]:
    """(key, function) for each public function and public method of a public class defined in ``module``."""
    for name, obj in list(vars(module).items()):  # guarding adds a name to the module's globals
        if name.startswith("_"):
            continue
        if isinstance(obj, types.FunctionType) and obj.__module__ == module.__name__ and _defined_in(obj, folder):
            yield f"{module.__name__}.{obj.__qualname__}", obj
        elif inspect.isclass(obj) and obj.__module__ == module.__name__:
            for attr, member in list(vars(obj).items()):
                if attr.startswith("_"):
                    continue
                fn = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
                if isinstance(fn, types.FunctionType) and _defined_in(fn, folder):
                    yield f"{module.__name__}.{fn.__qualname__}", fn


def install() -> None:
    """Guard the helpers of every module of :data:`PACKAGES` loaded so far (cheap when nothing is new)."""
    dirs = {}  # the folder of each guarded package loaded: only code defined there is guarded
    for package in PACKAGES:
        if path := getattr(sys.modules.get(package), "__file__", None):
            dirs[package] = str(Path(path).resolve().parent) + "/"
    for name, module in list(sys.modules.items()):
        if name in _seen_modules or module is None:
            continue
        package = name.split(".", 1)[0]
        if package not in dirs or name == __name__:  # this module runs inside every armed call
            continue
        _seen_modules.add(name)
        for key, fn in helpers(module, dirs[package]):
            _guard(fn, key)


def guarded() -> dict[str, types.FunctionType]:
    """Every guarded helper so far (after :func:`install`), by key ("course.gradcheck.numerical_vjp")."""
    return dict(_functions)


@contextmanager
def forbid_helpers() -> Iterator[list[str]]:
    """Arm every guard while the block runs; yield the list of helpers the block called.

    The record survives a student's ``try/except`` around the call, as the autograd guard's does.
    """
    install()
    record: list[str] = []
    _armed.append(record)
    try:
        # The grader's re-check runs the call in another process, whose own tripwires say what it touched.
        with witness.watching(lambda m: record.extend(m.delegated)):
            yield record
    finally:
        _armed.remove(record)


def pinned_forbid_helpers() -> Callable[[], AbstractContextManager[list[str]]]:
    """:func:`forbid_helpers` as it is now, with this module's list of armed records as it is now put back as
    each block starts: a cell that replaced the list (to disarm the tripwires for good) ran before the block;
    the block itself could still, and the docs say so. The grader's worker takes this at start-up."""
    armed, forbid = _armed, forbid_helpers

    @contextmanager
    def helpers():
        global _armed
        _armed = armed
        with forbid() as record:
            yield record

    return helpers


def original(key: str) -> types.FunctionType:
    """The unguarded function behind ``key`` (for tests)."""
    return _originals[key]

