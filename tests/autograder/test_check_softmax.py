"""The checks of 02_softmax_collapse: the solution passes, each mutant gets its diagnosis, and every check can fail.

Both the hidden checks (``autograder.check.softmax``) and the visible ones
(``course.selfcheck.softmax``) run on the same functions: a student reads the same
diagnosis before submitting as after. ``softmax_backward`` is also graded on what it
allocates: building an N×N tensor is ``materialized-jacobian`` even with the right values.
"""

import re

import pytest
import torch

import autograder.check
import autograder.check.softmax as hidden
import course
import course.selfcheck.softmax as visible
from autograder.submissions import mutants
from course.diagnose import GradingFailure
from tests.support import mutant_functions, solution_cells, solutions

SLUG = "02_softmax_collapse"
FUNCTIONS = ["softmax_jacobian", "softmax_backward", "softmax_cross_entropy_backward"]
SEEDS = ["0", "1"]  # hidden inputs are fresh on every run; these replay two of them
SOLUTION = solutions(SLUG)
MUTANTS = mutants(SLUG)
F64 = torch.float64

# The bug classes each exercise must have a mutant for (the list, where it applies).
REQUIRED = {
    "softmax_jacobian": {"sign", "broadcast-axis"},
    "softmax_backward": {"materialized-jacobian", "broadcast-axis", "sign"},
    "softmax_cross_entropy_backward": {"scale", "broadcast-axis", "batch-reduction", "non-finite"},
}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors only: torch's intra-op threads cost far more than they save here (100× on a busy 2-core box)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(params=SEEDS)
def seed(request, monkeypatch):
    monkeypatch.setenv("AUTOGRADER_SEED", request.param)
    return request.param


def both(name: str):
    return [getattr(hidden, name), getattr(visible, name)]


def failure_of(check, fn) -> GradingFailure:
    with pytest.raises(GradingFailure) as info:
        check(fn)
    return info.value


# ---------------------------------------------------------------------------
# The solution


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_solution_passes_hidden_and_visible_checks_quietly(name, seed, capsys):
    hidden_check, visible_check = both(name)
    hidden_check(SOLUTION[name])
    assert capsys.readouterr() == ("", "")
    visible_check(SOLUTION[name])
    out, err = capsys.readouterr()
    assert err == "", "nbgrader scores a test cell that writes to stderr zero"
    lines = out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"✓ {name} passes the visible checks (")


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_notebook_calls_reach_these_checks(name):
    assert getattr(autograder.check, name) is getattr(hidden, name)
    assert getattr(course.selfcheck, name) is getattr(visible, name)


def test_the_hidden_references_agree_with_autograd():
    gen = torch.Generator().manual_seed(0)
    x, dy = torch.randn(2, 3, 7, generator=gen, dtype=F64), torch.randn(2, 3, 7, generator=gen, dtype=F64)
    y = torch.softmax(x, -1)
    assert torch.allclose(hidden.jacobian_reference(y), visible._jacobian_reference(y))
    assert torch.allclose(hidden.backward_reference(y, dy), visible._backward_reference(y, dy))
    target = torch.randint(0, 7, (2, 3), generator=gen)
    for logits, t in [(x, target), visible.saturated_logits(x)]:
        assert torch.allclose(hidden.ce_reference(logits, t), visible._ce_reference(logits, t), atol=1e-15)


# ---------------------------------------------------------------------------
# The mutants

EXPECTED = [(m, test, cls) for m in MUTANTS for test, cls in m.expect.items()]


@pytest.mark.parametrize("mutant, test, cls", EXPECTED, ids=[f"{m.name}-{t}" for m, t, _ in EXPECTED])
def test_each_mutant_gets_its_diagnosis_from_both_checks(mutant, test, cls, seed, capsys):
    name = test.removeprefix("test_")
    fn = mutant_functions(mutant)[name]
    for check in both(name):
        failure = failure_of(check, fn)
        assert failure.cls == cls, f"{check.__module__}: {failure}"
        assert str(failure).startswith(f"diagnosis: {cls} — ")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_a_mutant_breaks_only_what_it_declares(mutant):
    functions = mutant_functions(mutant)
    for name in FUNCTIONS:
        if f"test_{name}" not in mutant.expect:
            for check in both(name):
                check(functions[name])


def test_the_mutants_cover_the_bug_classes_of_every_exercise():
    assert 1 <= len(MUTANTS) <= 5, "each mutant is a full notebook run in `make grade`: keep them few"
    seen = {name: set() for name in FUNCTIONS}
    for m in MUTANTS:
        assert set(m.expect) == {f"test_{f}" for f in m.cells}, f"{m.name}: one expect line per replaced cell"
        for test, cls in m.expect.items():
            seen[test.removeprefix("test_")].add(cls)
    for name, classes in REQUIRED.items():
        assert classes <= seen[name], f"{name}: no mutant for {sorted(classes - seen[name])}"


# ---------------------------------------------------------------------------
# The stub, exceptions, autograd, and the memory property


def released(name: str):
    """The function as the release notebook has it: the solution region replaced by nbgrader's stub."""
    code = re.sub(r"( *)### BEGIN SOLUTION\n.*?### END SOLUTION",
                  lambda m: f"{m.group(1)}# YOUR CODE HERE\n{m.group(1)}raise course.todo()",
                  solution_cells(SLUG)[name], flags=re.S)
    ns = {"course": course, "torch": torch}
    exec(code, ns)
    return ns[name]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_stub_is_not_implemented(name):
    for check in both(name):
        assert failure_of(check, released(name)).cls == "not-implemented"


def test_an_exception_shows_the_students_line():
    def softmax_backward(y, dy):
        return torch.mm(y, dy)  # mm needs two matrices that chain: (B, N) @ (B, N) does not

    for check in both("softmax_backward"):
        failure = failure_of(check, softmax_backward)
        assert failure.cls == "error" and "return torch.mm(y, dy)" in str(failure)


def test_autograd_in_the_backward_is_refused():
    def softmax_backward(y, dy):
        x = y.log().requires_grad_(True)
        return torch.autograd.grad(torch.softmax(x, -1), x, dy)[0]

    for check in both("softmax_backward"):
        assert failure_of(check, softmax_backward).cls == "autograd-in-backward"


def test_torchs_own_backward_kernels_count_as_autograd():
    def softmax_backward(y, dy):
        return torch.ops.aten._softmax_backward_data(dy, y, -1, y.dtype)

    def softmax_cross_entropy_backward(logits, target):
        C = logits.shape[-1]
        logp = torch.log_softmax(logits.reshape(-1, C), -1)
        total = torch.tensor(float(target.numel()), dtype=logits.dtype)
        dlogp = torch.ops.aten.nll_loss_backward(torch.tensor(1.0, dtype=logits.dtype), logp, target.reshape(-1), None, 1, -100, total)
        return torch.ops.aten._log_softmax_backward_data(dlogp, logp, -1, logits.dtype).reshape(logits.shape)

    for name, fn in [("softmax_backward", softmax_backward), ("softmax_cross_entropy_backward", softmax_cross_entropy_backward)]:
        for check in both(name):
            failure = failure_of(check, fn)
            assert failure.cls == "autograd-in-backward" and "backward kernel aten." in str(failure)


def test_any_square_tensor_of_a_long_row_counts_not_only_the_jacobian():
    def softmax_backward(y, dy):
        ones = torch.ones(y.shape[-1], y.shape[-1], dtype=y.dtype)  # N×N, to sum rows by a matmul
        s = ((y * dy) @ ones)[..., :1]
        return y * (dy - s)

    for check in both("softmax_backward"):
        failure = failure_of(check, softmax_backward)
        assert failure.cls == "materialized-jacobian" and "aten.ones" in str(failure)


def test_broadcast_views_and_a_loop_over_rows_are_fine():
    def softmax_backward(y, dy):
        s = (y * dy).sum(-1, keepdim=True).expand(y.shape)  # a view: N per row, not N²
        rows = [y_r * (dy_r - s_r) for y_r, dy_r, s_r in zip(y.reshape(-1, y.shape[-1]), dy.reshape(-1, y.shape[-1]), s.reshape(-1, y.shape[-1]))]
        return torch.stack(rows).reshape(y.shape)

    for check in both("softmax_backward"):
        check(softmax_backward)


def test_a_jacobian_built_one_row_at_a_time_is_caught():
    def softmax_backward(y, dy):
        N = y.shape[-1]
        rows = [(torch.diag(y_r) - torch.outer(y_r, y_r)) @ dy_r for y_r, dy_r in zip(y.reshape(-1, N), dy.reshape(-1, N))]
        return torch.stack(rows).reshape(y.shape)

    for check in both("softmax_backward"):
        assert failure_of(check, softmax_backward).cls == "materialized-jacobian"


def test_a_result_with_extra_axes_is_a_shape_failure_not_a_crash():
    def softmax_backward(y, dy):
        return (y * dy).unsqueeze(-1).expand(*y.shape, 2)

    for check in both("softmax_backward"):
        assert failure_of(check, softmax_backward).cls == "shape"


def test_the_saturated_case_catches_a_guarded_log_that_vanishes():
    def softmax_cross_entropy_backward(logits, target):
        C = logits.shape[-1]
        M = logits.numel() // C
        y = torch.softmax(logits, -1)
        dy = -torch.nn.functional.one_hot(target, C).to(y.dtype) / (M * (y + 1e-12))  # -log(y + eps)
        return y * (dy - (y * dy).sum(-1, keepdim=True))

    for check in both("softmax_cross_entropy_backward"):
        failure = failure_of(check, softmax_cross_entropy_backward)
        assert failure.cls == "wrong-values" and "vanished" in str(failure)
