"""Every assignment's checks against its samples: the solution, the release stubs and each mutant.

For each assignment with samples (``tests/submissions/<assignment>/``) and each exercise
in it, both checks run on the same functions: the hidden one (``autograder.check.<name>``,
random inputs, replayed here for three seeds since grading draws a fresh one every run)
and the visible one (``course.selfcheck.<name>``, fixed inputs). A student must read the
same diagnosis before submitting as after grading.

- The source solution passes both quietly: the visible check prints one ✓ line, and
  nothing reaches stderr (nbgrader scores a test cell that writes there zero).
- The untouched release stub reads ``not-implemented`` from both.
- Each mutant gets its declared class from both, prints nothing, and passes every
  exercise it does not declare: a bug is diagnosed where it is, not in its neighbours.

What is particular to one lesson (the bug classes its mutants must cover, named bugs,
properties such as allocations) stays in that lesson's ``test_check_*.py``.
"""

from __future__ import annotations

import functools
import inspect

import pytest

import autograder.check as hidden
import course.selfcheck as visible
from course.triton_check import is_kernel
from tests.support import diagnosis, failure_of, mutant_named, releases, solutions
from tools.mutants import mutants, sample_assignments, source_notebook

pytestmark = pytest.mark.filterwarnings("error")


@functools.cache
def exercises(assignment: str) -> tuple[str, ...]:
    """The exercise behind each test cell, in notebook order (``test_<name>`` grades ``<name>``)."""
    return tuple(c.metadata["nbgrader"]["grade_id"].removeprefix("test_") for c in source_notebook(assignment).cells
                 if c.metadata.get("nbgrader", {}).get("grade"))


@functools.cache
def solved(assignment: str) -> dict:
    return solutions(assignment)


def both(name: str):
    return (getattr(hidden, name), getattr(visible, name))


EXERCISES = [pytest.param(a, name, id=f"{a}-{name}") for a in sample_assignments() for name in exercises(a)]
MUTANTS = [pytest.param(a, m.name, id=f"{a}-{m.name}") for a in sample_assignments() for m in mutants(a)]
DECLARED = [pytest.param(a, m.name, test_id.removeprefix("test_"), cls, id=f"{a}-{m.name}-{test_id}")
            for a in sample_assignments() for m in mutants(a) for test_id, cls in m.expect.items()]


# ---------------------------------------------------------------------------
# The notebook's test cells call these checks


@pytest.mark.parametrize("assignment, name", EXERCISES)
def test_each_test_cell_calls_the_visible_and_the_hidden_check(assignment, name):
    cell = next(c for c in source_notebook(assignment).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == f"test_{name}")
    assert f"course.selfcheck.{name}(" in cell.source and f"autograder.check.{name}(" in cell.source
    assert all(callable(check) for check in both(name))


def test_every_assignment_with_samples_has_mutants():
    for assignment in sample_assignments():
        assert mutants(assignment), assignment


# What course.sanitizer names: an access out of bounds in every notebook with a kernel, a race where programs share
# what they write (04's partial rows, 06's scatter).
SANITIZED = {"03_triton_fused_softmax": {"out-of-bounds"}, "04_layernorm": {"out-of-bounds", "race"},
             "05_attention_recompute": {"out-of-bounds"}, "06_topk_routing": {"race"},
             "07_fused_linear_cross_entropy": {"out-of-bounds"}, "08_mixed_precision_backward": {"out-of-bounds"},
             "09_matmul_backward_triton": {"out-of-bounds", "race"}, "10_attention_as_trained": {"out-of-bounds", "race"},
             "11_mlp_and_rope": {"out-of-bounds"}}


@pytest.mark.parametrize("assignment", list(SANITIZED))
def test_every_notebook_with_a_kernel_has_mutants_the_sanitizer_names(assignment):
    declared = {cls for m in mutants(assignment) for cls in m.expect.values()}
    assert SANITIZED[assignment] <= declared, f"{assignment}: no mutant gets {sorted(SANITIZED[assignment] - declared)}"


# ---------------------------------------------------------------------------
# The solution passes, quietly


@pytest.mark.parametrize("assignment, name", EXERCISES)
def test_the_solution_passes_the_hidden_check_silently(assignment, name, seeded, capsys):
    hidden_check, _ = both(name)
    hidden_check(solved(assignment)[name])
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("assignment, name", EXERCISES)
def test_the_solution_passes_the_visible_check_with_one_line(assignment, name, capsys):
    _, visible_check = both(name)
    visible_check(solved(assignment)[name])
    out, err = capsys.readouterr()
    assert err == "", "nbgrader scores a test cell that writes to stderr zero"
    assert out.startswith(f"✓ {name} passes the visible checks (") and out.count("\n") == 1, out


# ---------------------------------------------------------------------------
# The release stubs read not-implemented


def _signatures(obj) -> dict:
    """A function's signature, or a class's methods' signatures (a Function's forward and backward)."""
    if inspect.isclass(obj):
        return {m: inspect.signature(getattr(obj, m)) for m in ("forward", "backward") if hasattr(obj, m)}
    return {"": inspect.signature(obj)}


@pytest.mark.parametrize("assignment, name", EXERCISES)
def test_the_release_stub_reads_not_implemented(assignment, name, capsys):
    stub = releases(assignment)[name]
    if not is_kernel(stub):  # a @triton.jit stub's signature is the kernel's, checked by its launch
        assert _signatures(stub) == _signatures(solved(assignment)[name]), "the stub keeps the signature"
    for check in both(name):
        assert diagnosis(check, stub) == "not-implemented", check.__module__
    assert capsys.readouterr() == ("", ""), "a failing check prints nothing: no ✓, no stderr"


# ---------------------------------------------------------------------------
# Each mutant gets its diagnosis, and only where it declares one


@pytest.mark.parametrize("assignment, mutant, name, cls", DECLARED)
def test_each_mutant_gets_its_diagnosis_from_the_hidden_check(assignment, mutant, name, cls, seeded, capsys):
    hidden_check, _ = both(name)
    failure = failure_of(hidden_check, mutant_named(assignment, mutant)[name])
    assert failure.cls == cls, str(failure)
    assert str(failure).startswith(f"diagnosis: {cls} — "), "the first line a student reads names the class"
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("assignment, mutant, name, cls", DECLARED)
def test_each_mutant_gets_the_same_diagnosis_from_the_visible_check(assignment, mutant, name, cls, capsys):
    _, visible_check = both(name)
    assert diagnosis(visible_check, mutant_named(assignment, mutant)[name]) == cls
    assert capsys.readouterr() == ("", ""), "a failing check prints nothing: no ✓, no stderr"


@pytest.mark.parametrize("assignment, mutant", MUTANTS)
def test_a_mutant_breaks_only_what_it_declares(assignment, mutant, capsys):
    declared = next(m for m in mutants(assignment) if m.name == mutant).expect
    functions = mutant_named(assignment, mutant)
    for name in exercises(assignment):
        if f"test_{name}" not in declared:
            hidden_check, _ = both(name)
            assert diagnosis(hidden_check, functions[name]) == "pass", name
    assert capsys.readouterr().err == ""

