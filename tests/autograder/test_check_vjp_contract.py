"""00_vjp_contract: the checks name this lesson's bugs, and can fail.

The solution, the release stubs and each mutant's diagnosis are checked for every lesson
in ``test_samples.py``. Every check is run twice where it matters: the hidden one (``autograder.check``, random
inputs — several seeds here, since grading draws a fresh one each run) and the visible
one (``course.selfcheck``, fixed inputs). A mutant must get the same diagnosis from both.
Warnings are errors in this module: a warning in a test cell writes to stderr, and
nbgrader scores such a cell zero.
"""

from __future__ import annotations

import inspect

import pytest
import torch

import autograder.check as hidden
import course.selfcheck as visible
from autograder.inputs import generator, randn
from course.diagnose import GradingFailure, relative_error
from course.selfcheck.vjp_contract import LSCE, CosineBowl, SineQuadratic, lsce_case, lsce_reference
from tests.support import (
    assert_crash_quotes_the_line,
    assert_mutants_cover,
    diagnosis,
    edited_solution,
    failure_of,
    mutant_named,
    solution_fixture,
    unguarded,
    with_cells,
)
from tools.mutants import mutants

pytestmark = pytest.mark.filterwarnings("error")

ASSIGNMENT = "00_vjp_contract"
EXERCISES = ("numerical_gradient", "relative_error", "linear_softmax_ce_backward", "sigmoid_backward")
MUTANTS = mutants(ASSIGNMENT)
F64 = torch.float64
solution = solution_fixture(ASSIGNMENT)


# ---------------------------------------------------------------------------
# The mutants (their diagnoses, for every lesson: test_samples.py)


def test_mutants_cover_the_bugs_this_lesson_is_about():
    assert_mutants_cover(MUTANTS, {
        ("numerical_gradient", "wrong-values"),  # forward difference (and others)
        ("relative_error", "scale"),  # absolute error
        ("linear_softmax_ce_backward", "sign"),  # the log-likelihood for the loss
        ("linear_softmax_ce_backward", "scale"),  # a summed loss where it is a mean
        ("linear_softmax_ce_backward", "transpose"),  # the gradient taken with respect to Wᵀ
        ("linear_softmax_ce_backward", "batch-reduction"),
        ("linear_softmax_ce_backward", "wrong-values"),  # the linear stage without z̄
        ("sigmoid_backward", "wrong-values"),  # through x, tanh's, exp's, no ȳ
        ("sigmoid_backward", "sign"),
    }, most=6)


def test_a_forward_difference_is_named_as_one(seeded):
    with pytest.raises(GradingFailure, match="forward difference"):
        hidden.numerical_gradient(mutant_named(ASSIGNMENT, "forward_difference")["numerical_gradient"])


# ---------------------------------------------------------------------------
# Student exceptions


STUDENT_CELL = '''\
def linear_softmax_ce_backward(x, W, b, target):
    y = torch.softmax(x @ W + b, dim=1)
    dz = (y - torch.nn.functional.one_hot(target, W.shape[1])) / x.shape[0]
    return dz @ W, x.T @ dz, dz.sum(dim=0)
'''


def test_an_exception_is_error_and_names_the_students_line():
    assert_crash_quotes_the_line((hidden.linear_softmax_ce_backward, visible.linear_softmax_ce_backward), STUDENT_CELL,
                                 "linear_softmax_ce_backward", "<ipython-input-7>",
                                 "line 4: return dz @ W, x.T @ dz, dz.sum(dim=0)")


# ---------------------------------------------------------------------------
# The checks themselves: references right, margins wide, failures specific


@pytest.mark.parametrize("probe_kind", ["visible", "hidden"])
def test_probe_differences_are_exact_and_approach_the_gradient(probe_kind):
    gen = generator("probe-test")
    x = randn(gen, 2, 3, 2)
    probe = CosineBowl(x, gen, 1e-3) if probe_kind == "visible" else SineQuadratic(x, gen, 1e-3)
    h = 1e-3  # large enough that round-off (~1e-13) does not blur the comparison
    central, forward = torch.empty_like(x), torch.empty_like(x)
    for i in range(x.numel()):
        e = torch.zeros(x.numel(), dtype=F64)
        e[i] = h
        e = e.reshape(x.shape)
        central.view(-1)[i] = (float(probe(x + e)) - float(probe(x - e))) / (2 * h)
        forward.view(-1)[i] = (float(probe(x + e)) - float(probe(x))) / h
    assert relative_error(probe.central(h), central) < 1e-10
    assert relative_error(probe.one_sided(h), forward) < 1e-10
    # As h → 0 the exact central difference tends to the true gradient (autograd's).
    xg = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(torch.as_tensor(probe._value(xg)), xg)
    assert relative_error(probe.central(1e-6), grad) < 1e-10


def test_the_tolerance_separates_central_from_forward_differences(solution):
    """Over many hidden draws, a central difference sits far below 1e-8 and a forward one far above."""
    worst_central, best_forward = 0.0, 1.0
    for seed in range(10):
        gen = generator(f"margin-{seed}")
        for shape in [(1, 6), (7, 3), (2, 3, 5)]:
            x = randn(gen, *shape)
            probe = SineQuadratic(x, gen, 1e-6)
            central = solution["numerical_gradient"](probe, x)
            worst_central = max(worst_central, relative_error(central, probe.central(1e-6)))
            best_forward = min(best_forward, relative_error(probe.one_sided(1e-6), probe.central(1e-6)))
    assert worst_central < 1e-9, worst_central  # 10× below the tolerance
    assert best_forward > 1e-7, best_forward  # 10× above it


def test_the_student_gets_a_plain_function_not_the_probe(seeded):
    """The probe knows its exact differences (``central``): handing it over would hand over the answer."""
    seen = []

    def inspects_f(f, x, eps=1e-6):
        seen.append(f)
        raise NotImplementedError

    for check in (hidden.numerical_gradient, visible.numerical_gradient):
        with pytest.raises(GradingFailure):
            check(inspects_f)
    assert seen and all(type(f).__name__ == "function" for f in seen)
    assert not any(hasattr(f, name) for f in seen for name in ("central", "one_sided", "value", "base"))


def test_a_non_contiguous_x_is_in_every_check(solution, seeded):
    """The transposed case comes last, and a copy that keeps x's strides cannot .view(-1) it."""
    layouts = []

    def records(f, x, eps=1e-6):
        layouts.append(x.is_contiguous())
        return solution["numerical_gradient"](f, x, eps)

    for check in (hidden.numerical_gradient, visible.numerical_gradient):
        layouts.clear()
        check(records)
        assert layouts[-1] is False and all(layouts[:-1])

    strided_copy = with_cells(ASSIGNMENT, {"numerical_gradient": edited_solution(ASSIGNMENT, "numerical_gradient", """
-    x = x.detach().to(torch.float64).clone(memory_format=torch.contiguous_format)
+    x = x.detach().to(torch.float64, copy=True)  # the old solution: .to(copy=True) keeps a transpose's strides
""")})["numerical_gradient"]
    for check in (hidden.numerical_gradient, visible.numerical_gradient):
        with pytest.raises(GradingFailure, match="non-contiguous") as info:
            check(strided_copy)
        assert info.value.cls == "error"


def _lsce_reference(x, W, b, target):
    """(x̄, W̄, b̄) in closed form: z̄ = (softmax(z) − E)/M, then through z = x W + b."""
    dz = (torch.softmax(x @ W + b, dim=1) - torch.nn.functional.one_hot(target, W.shape[1])) / x.shape[0]
    return dz @ W.T, x.T @ dz, dz.sum(dim=0)


def test_the_references_agree_with_autograd_and_known_values():
    gen = generator("reference-test")
    for M, K, C in [(1, 5, 3), (7, 6, 6), (13, 9, 10)]:
        x, W, b = randn(gen, M, K), randn(gen, K, C), randn(gen, C)
        target = torch.randint(0, C, (M,), generator=gen)
        for mine, auto in zip(_lsce_reference(x, W, b, target), lsce_reference(x, W, b, target)):
            assert relative_error(mine, auto) < 1e-12
    u, w = torch.tensor([3.0, 4.0], dtype=F64), torch.tensor([4.0, 3.0], dtype=F64)
    assert relative_error(u, w) == pytest.approx(2**0.5 / 5)
    assert relative_error(u, -u) == pytest.approx(2.0)
    assert relative_error(torch.zeros(3, 2, dtype=F64), torch.zeros(3, 2, dtype=F64)) == 0.0


def zeros_like_outputs(x, W, b, target):
    return torch.zeros_like(x), torch.zeros_like(W), torch.zeros_like(b)


@pytest.mark.parametrize("name, wrong, cls", [
    ("numerical_gradient", lambda f, x, eps=1e-6: torch.zeros(x.shape, dtype=F64), "wrong-values"),
    ("numerical_gradient", lambda f, x, eps=1e-6: torch.zeros(x.numel(), dtype=F64), "shape"),  # flattened
    ("relative_error", lambda a, b: 0.0, "wrong-values"),
    ("relative_error", lambda a, b: "0.0", "shape"),  # not a number
    ("linear_softmax_ce_backward", zeros_like_outputs, "wrong-values"),
    ("linear_softmax_ce_backward", lambda x, W, b, t: zeros_like_outputs(x, W, b, t)[:2], "shape"),  # two outputs
])
def test_trivially_wrong_answers_fail(name, wrong, cls, seeded):
    assert diagnosis(getattr(hidden, name), wrong) == cls
    assert diagnosis(getattr(visible, name), wrong) == cls


def numerical_gradient_in_float32(f, x, eps=1e-6):
    """Right formula, but steps a float32 x in float32: the step drowns in rounding."""
    x = x.detach().clone()
    dx = torch.zeros(x.shape, dtype=F64)
    for i in range(x.numel()):
        x_i = x.view(-1)[i].item()
        x.view(-1)[i] = x_i + eps
        f_plus = float(f(x))
        x.view(-1)[i] = x_i - eps
        f_minus = float(f(x))
        x.view(-1)[i] = x_i
        dx.view(-1)[i] = (f_plus - f_minus) / (2 * eps)
    return dx


def test_a_float32_input_is_named(seeded):
    for check in (hidden.numerical_gradient, visible.numerical_gradient):
        with pytest.raises(GradingFailure, match="arrives as torch.float32") as info:
            check(numerical_gradient_in_float32)
        assert info.value.cls == "wrong-values"


def test_a_changed_caller_x_is_named(solution, seeded):
    def leaves_x_changed(f, x, eps=1e-6):
        dx = solution["numerical_gradient"](f, x, eps)
        x.view(-1)[0] += 1.0  # a stray in-place edit after the work is done
        return dx

    for check in (hidden.numerical_gradient, visible.numerical_gradient):
        with pytest.raises(GradingFailure, match="changed the caller's x"):
            check(leaves_x_changed)


def test_an_x_restored_by_arithmetic_passes(seeded):
    """x + ε − 2ε + ε can differ from x by an ulp: harmless, and not reported as a change."""
    def in_place(f, x, eps=1e-6):
        dx = torch.zeros(x.shape, dtype=F64)
        flat = x.view(-1)
        for i in range(flat.numel()):
            flat[i] += eps
            f_plus = float(f(x))
            flat[i] -= 2 * eps
            f_minus = float(f(x))
            flat[i] += eps
            dx.view(-1)[i] = (f_plus - f_minus) / (2 * eps)
        return dx

    for check in (hidden.numerical_gradient, visible.numerical_gradient):
        # Every float64 case passes; only the float32 x fails, where the in-place steps drown in rounding.
        with pytest.raises(GradingFailure, match="given in float32"):
            check(in_place)


def test_a_forgotten_softmax_is_named(seeded):
    def no_softmax(x, W, b, target):
        z = x @ W + b
        dz = (z - torch.nn.functional.one_hot(target, W.shape[1])) / x.shape[0]
        return dz @ W.T, x.T @ dz, dz.sum(dim=0)

    with pytest.raises(GradingFailure, match="in place of softmax"):
        hidden.linear_softmax_ce_backward(no_softmax)


def keepdim_db(solution_fn):
    def backward(x, W, b, target):
        dx, dW, db = solution_fn(x, W, b, target)
        return dx, dW, db[None, :]  # (1, C): a kept size-1 axis, not a kept batch axis
    return backward


def test_keepdim_db_is_shape_not_batch_reduction(solution, seeded):
    fn = keepdim_db(solution["linear_softmax_ce_backward"])
    assert diagnosis(hidden.linear_softmax_ce_backward, fn) == "shape"
    assert diagnosis(visible.linear_softmax_ce_backward, fn) == "shape"


def test_a_transposed_dW_is_seen_with_a_square_W_alone(solution):
    """With K == C a transposed W̄ has the right shape; the values still give it away."""
    def transposed(x, W, b, target):
        dx, dW, db = solution["linear_softmax_ce_backward"](x, W, b, target)
        return dx, dW.T, db

    gen = torch.Generator().manual_seed(3)
    with pytest.raises(GradingFailure) as info:
        LSCE.check(transposed, [lsce_case(gen, 1, 4, 4), lsce_case(gen, 7, 4, 4)])
    assert info.value.cls == "transpose" and "shape" not in info.value.sentence.split(":")[0]


def test_autograd_inside_the_backward_is_refused():
    reference = unguarded(lsce_reference)  # autograd inside, but not a course helper's tripwire

    def with_autograd(x, W, b, target):
        return reference(x, W, b, target)

    assert diagnosis(hidden.linear_softmax_ce_backward, with_autograd) == "autograd-in-backward"
    assert diagnosis(visible.linear_softmax_ce_backward, with_autograd) == "autograd-in-backward"


# ---------------------------------------------------------------------------
# Part C measured stage by stage: the tolerance between central and one-sided chains, and its named bugs


def one_sided_gradient(f, x, eps=1e-6):
    """A numerical_gradient that fails Part A: (f(x + ε) − f(x))/ε, error O(ε)."""
    x = torch.empty(x.shape, dtype=F64).copy_(x)
    dx, flat = torch.zeros_like(x), x.view(-1)
    for i in range(flat.numel()):
        keep = flat[i].item()
        base = float(f(x))
        flat[i] = keep + eps
        dx.view(-1)[i] = (float(f(x)) - base) / eps
        flat[i] = keep
    return dx


def test_the_tolerance_sits_between_central_and_one_sided_chains(solution):
    """1e-7 (LSCE.tol) is above what the stage-by-stage central differences are off by at every hidden shape, with
    ten times to spare, and below what one-sided ones are off by: measured here, as the spec's comment says."""
    from autograder.check.vjp_contract import LSCE_SHAPES
    from course.selfcheck.vjp_contract import LSCE

    central_chain = solution["linear_softmax_ce_backward"]
    source = inspect.getsource(one_sided_gradient).replace("one_sided_gradient", "numerical_gradient")
    one_sided_chain = with_cells(ASSIGNMENT, {"numerical_gradient": source.replace("F64", "torch.float64")}
                                 )["linear_softmax_ce_backward"]
    gen = torch.Generator().manual_seed(11)
    worst_central, best_one_sided = 0.0, 1.0
    for M, K, C, t in LSCE_SHAPES:
        case = lsce_case(gen, M, K, C, transposed=t)
        reference = lsce_reference(*case.args)
        worst_central = max(worst_central, *(relative_error(g, r) for g, r in zip(central_chain(*case.args), reference)))
        best_one_sided = min(best_one_sided, max(relative_error(g, r) for g, r in zip(one_sided_chain(*case.args), reference)))
    assert worst_central < LSCE.tol / 10 and best_one_sided > LSCE.tol, (worst_central, best_one_sided)


def test_a_chain_of_one_sided_differences_is_named(seeded):
    def chain(x, W, b, target):
        z = x @ W + b
        dz = one_sided_gradient(lambda z_: torch.nn.functional.cross_entropy(z_, target), z)
        dx = one_sided_gradient(lambda x_: ((x_ @ W + b) * dz).sum(), x)
        dW = one_sided_gradient(lambda W_: ((x @ W_ + b) * dz).sum(), W)
        db = one_sided_gradient(lambda b_: ((x @ W + b_) * dz).sum(), b)
        return dx, dW, db

    for check in (hidden.linear_softmax_ce_backward, visible.linear_softmax_ce_backward):
        with pytest.raises(GradingFailure, match="one-sided differences") as info:
            check(chain)
        assert info.value.cls == "wrong-values" and info.value.hint == 1


@pytest.mark.parametrize("bug, words, hint", [
    ("unweighted", "sum of z", 2),  # the linear stage's scalar without z̄
    ("no-softmax", "softmax left out", 1),  # the head's loss taken on the logits
])
def test_the_chains_named_bugs(bug, words, hint, solution, seeded):
    numerical_gradient = solution["numerical_gradient"]

    def chain(x, W, b, target):
        z = x @ W + b
        if bug == "unweighted":
            dz = torch.ones_like(z)  # the linear stage's scalar is then the sum of z
        else:
            dz = numerical_gradient(lambda z_: torch.nn.functional.nll_loss(z_, target), z)  # −z_t: no softmax

        def stage(i):  # the linear stage's VJP for input i, the other two held
            def scalar(t):
                args = [x, W, b]
                args[i] = t
                return ((args[0] @ args[1] + args[2]) * dz).sum()
            return numerical_gradient(scalar, (x, W, b)[i])

        return tuple(stage(i) for i in range(3))

    for check in (hidden.linear_softmax_ce_backward, visible.linear_softmax_ce_backward):
        failure = failure_of(check, chain)
        assert failure.cls == "wrong-values" and words in failure.sentence and failure.hint == hint


# ---------------------------------------------------------------------------
# Part D: sigmoid_backward


def test_sigmoid_right_passes_and_trivial_ones_fail(solution, seeded):
    right = solution["sigmoid_backward"]
    for check in (hidden.sigmoid_backward, visible.sigmoid_backward):
        check(right)
        assert diagnosis(check, lambda y, dy: -right(y, dy)) == "sign"
        assert diagnosis(check, lambda y, dy: 2 * right(y, dy)) == "scale"
        assert diagnosis(check, lambda y, dy: right(y, dy).reshape(-1)) == "shape"


@pytest.mark.parametrize("wrong, words, hint", [
    (lambda y, dy: dy * torch.sigmoid(y) * (1 - torch.sigmoid(y)), "as if y were x", 3),  # through x
    (lambda y, dy: dy * (1 - y * y), "tanh", 2),  # the wrong function's derivative
    (lambda y, dy: dy * y, "exp", 2),
    (lambda y, dy: y * (1 - y), "diagonal alone", 1),  # ȳ forgotten
])
def test_sigmoid_named_bugs(wrong, words, hint, seeded):
    for check in (hidden.sigmoid_backward, visible.sigmoid_backward):
        failure = failure_of(check, wrong)
        assert failure.cls == "wrong-values" and words in failure.sentence and failure.hint == hint


def test_sigmoid_autograd_inside_is_refused(seeded):
    def with_autograd(y, dy):
        x = torch.logit(y).requires_grad_(True)
        return torch.autograd.grad(torch.sigmoid(x), x, dy)[0]

    assert diagnosis(visible.sigmoid_backward, unguarded(with_autograd)) == "autograd-in-backward"
    assert diagnosis(hidden.sigmoid_backward, unguarded(with_autograd)) == "autograd-in-backward"


def test_the_hidden_relative_error_is_part_bs_and_the_courses_is_not():
    """The course's measure is relative to the reference (course.diagnose), so it answers nothing; Part B's symmetric
    one is the hidden check's expected value, on the hidden side only."""
    from autograder.check.vjp_contract import _relative_error as part_b

    a, b = torch.tensor([3.0, 4.0], dtype=F64), torch.tensor([6.0, 8.0], dtype=F64)
    assert part_b(a, b) == pytest.approx(0.5) == part_b(b, a)
    assert relative_error(a, b) == pytest.approx(0.5) and relative_error(b, a) == pytest.approx(1.0)
    assert part_b(torch.zeros(2, dtype=F64), torch.zeros(2, dtype=F64)) == 0.0
