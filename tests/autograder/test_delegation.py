"""No free answers from the course's own helpers: delegating an exercise to one is ``delegated-to-helper``.

``course`` ships working code (central differences, the relative error, closed forms behind
the checks), and students receive it. While a check runs a student's function, every public
function and method ``course`` defines is a tripwire (``course.delegation``). Here:

- the tripwires cover every public function of every ``course`` module, found by a walk of
  its own, save the few exempt by design;
- the answers the issue found (``numerical_gradient`` by ``central_difference_grad``,
  ``relative_error = course.relative_error``) and the universal one (``numerical_vjp`` for any
  VJP) fail both checks;
- for *every* graded exercise, the solution with one helper call added to each function it
  defines (each method of a class, the body of a kernel) fails both checks — so the guard
  is armed wherever the checks run student code;
- for one exercise, a call of *each* guarded helper fails its check — so no helper is missed.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import types

import pytest
import torch

import autograder.check as hidden
import course
import course.selfcheck as visible
from course import delegation
from tests.autograder.test_samples import EXERCISES
from tests.support import diagnosis, failure_of, run_notebook_code, solution_cells, solutions


def both(name: str):
    return (getattr(hidden, name), getattr(visible, name))


# ---------------------------------------------------------------------------
# What is guarded


def _all_course_modules() -> list[types.ModuleType]:
    names = ["course"] + [m.name for m in pkgutil.walk_packages(course.__path__, "course.")]
    return [importlib.import_module(n) for n in names]


def public_functions(module: types.ModuleType):
    """(qualified name, function) for the module's own public functions and its public classes' public methods."""
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj):
            yield f"{module.__name__}.{name}", obj
        elif inspect.isclass(obj):
            for attr, member in vars(obj).items():
                fn = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
                if not attr.startswith("_") and inspect.isfunction(fn):
                    yield f"{module.__name__}.{name}.{attr}", fn


# Every course module loaded, so that the list of tripwires is the whole package's.
MODULES = _all_course_modules()
delegation.install()
COURSE_KEYS = sorted(k for k in delegation.guarded() if k.startswith("course."))


def test_every_public_course_function_is_a_tripwire():
    # A function is named by its qualified name, as the guard names it: a class attribute that holds a module
    # function (a dataclass field's default, ``rule = measured``) is that function, guarded once.
    expected = {f"{module.__name__}.{fn.__qualname__}" for module in MODULES if module is not delegation
                for _, fn in public_functions(module)
                if not fn.__code__.co_freevars}  # closures are decorator wrappers (the checks), never answers
    assert len(expected) > 100
    assert expected - set(delegation.EXEMPT) == set(COURSE_KEYS)


def test_a_guarded_helper_keeps_its_signature_its_source_and_its_behaviour():
    delegation.install()
    fn = course.gradcheck.central_difference_grad
    assert "course.gradcheck.central_difference_grad" in delegation.guarded()
    assert list(inspect.signature(fn).parameters) == ["f", "x", "eps"]
    assert "def central_difference_grad" in inspect.getsource(fn)
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert torch.allclose(fn(lambda t: (t**2).sum(), x), 2 * x)


def _resolve(key: str):
    """The function a key names: a module's function, or a class's method ("course.witness.Measurement.elements")."""
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise AssertionError(f"{key} names no module")


def test_exempt_helpers_exist_and_say_why():
    for key, why in delegation.EXEMPT.items():
        assert callable(_resolve(key)), key
        assert len(why.split()) >= 4


def test_the_record_survives_a_student_who_catches_the_refusal():
    def sly(a, b):
        try:
            return course.relative_error(a, b)
        except Exception:
            return 0.0

    for check in both("relative_error"):
        assert diagnosis(check, sly) == "delegated-to-helper"


# ---------------------------------------------------------------------------
# The answers the issue found, and the universal one


def numerical_gradient_by_helper(f, x, eps=1e-6):
    return course.gradcheck.central_difference_grad(f, x, eps)


def linear_backward_by_numerical_vjp(x, w, dy):
    return course.gradcheck.numerical_vjp(torch.matmul, (x, w), dy)


@pytest.mark.parametrize("name, answer", [
    ("numerical_gradient", numerical_gradient_by_helper),
    ("relative_error", course.relative_error),
    ("relative_error", course.gradcheck.relative_error),
    ("linear_backward", linear_backward_by_numerical_vjp),
], ids=["central_difference_grad", "course.relative_error", "gradcheck.relative_error", "numerical_vjp"])
def test_delegated_answers_fail_both_checks(name, answer, capsys):
    for check in both(name):
        failure = failure_of(check, answer)
        assert failure.cls == "delegated-to-helper", str(failure)
        assert str(failure).startswith("diagnosis: delegated-to-helper — ")
    assert capsys.readouterr() == ("", "")


def test_the_checks_probe_gives_no_answer_away():
    """numerical_gradient's f is the checker's probe: its exact differences must not be reachable from it."""

    def read_the_probe(f, x, eps=1e-6):
        return f.central(eps)

    for check in both("numerical_gradient"):
        assert diagnosis(check, read_the_probe) != "pass"


# ---------------------------------------------------------------------------
# Every exercise, every way the checks call student code


class _CallHelperFirst(ast.NodeTransformer):
    """Put ``<call>`` first in every function the target defines (after its docstring)."""

    def __init__(self, target: str, call: str):
        self.target, self.call = target, ast.parse(call).body[0]

    def visit_Module(self, node):
        for top in node.body:
            if getattr(top, "name", None) == self.target:
                defs = [top] if isinstance(top, ast.FunctionDef) else \
                    [n for n in ast.walk(top) if isinstance(n, ast.FunctionDef)]
                for fn in defs:
                    docstring = bool(fn.body) and isinstance(fn.body[0], ast.Expr) and \
                        isinstance(getattr(fn.body[0], "value", None), ast.Constant)
                    fn.body.insert(1 if docstring else 0, self.call)
        return ast.fix_missing_locations(node)


def with_helper_call(assignment: str, name: str, call: str = "course.gradcheck.verdict(0.0)") -> dict:
    cells = dict(solution_cells(assignment))
    tree = _CallHelperFirst(name, call).visit(ast.parse(cells[name]))
    cells[name] = ast.unparse(tree)
    assert call.split("(")[0] in cells[name], f"{name} defines no function to put the call in"
    return run_notebook_code(assignment, cells, f"delegating {name}")


@pytest.mark.parametrize("assignment, name", EXERCISES)
def test_an_exercise_that_calls_a_helper_fails_both_checks(assignment, name, monkeypatch, capsys):
    monkeypatch.setenv("AUTOGRADER_SEED", "0")
    functions = with_helper_call(assignment, name)
    for check in both(name):
        assert diagnosis(check, functions[name]) == "delegated-to-helper", check.__module__
    assert capsys.readouterr().err == ""


def test_the_unchanged_solution_still_passes_after_the_helpers_are_guarded(capsys):
    delegation.install()
    assert delegation.guarded()
    for check in both("relative_error"):
        assert diagnosis(check, solutions("00_vjp_contract")["relative_error"]) == "pass"


@pytest.mark.parametrize("key", COURSE_KEYS)
def test_calling_any_guarded_helper_fails_a_check(key, monkeypatch):
    monkeypatch.setenv("AUTOGRADER_SEED", "0")
    helper = delegation.guarded()[key]
    right = solutions("00_vjp_contract")["relative_error"]

    def calls_one_helper(a, b):
        try:
            helper()  # armed, the tripwire fires before the arguments are even bound
        except TypeError:
            pass
        return right(a, b)

    assert diagnosis(hidden.relative_error, calls_one_helper) == "delegated-to-helper"


def test_the_reference_kernels_are_helpers_too():
    import kernels

    def triton_softmax_by_reference(x):
        return kernels.softmax(x)

    assert diagnosis(visible.triton_softmax, triton_softmax_by_reference) == "delegated-to-helper"
