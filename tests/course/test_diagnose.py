"""The classifier names each bug class from the result alone, and says where."""

import pytest
import torch

from course.diagnose import (
    CLASSES,
    Alternative,
    Case,
    GradingFailure,
    batch_refined,
    call_student,
    diagnose,
    graded,
    relative_error,
    rerun_above_batch_1,
    run_cases,
    transposed_view,
)
from course.spec import Exercise

g = torch.Generator().manual_seed(0)
X = torch.randn(7, 5, generator=g, dtype=torch.float64)
W = torch.randn(5, 4, generator=g, dtype=torch.float64)
WSQ = torch.randn(5, 5, generator=g, dtype=torch.float64)
DY = torch.randn(7, 4, generator=g, dtype=torch.float64)


def cls_of(got, expected, **kw):
    failure = diagnose("dw", got, expected, **kw)
    return None if failure is None else failure.cls


def test_a_right_answer_passes():
    assert diagnose("dw", X.T @ DY, X.T @ DY) is None
    assert diagnose("dw", (X.T @ DY) * (1 + 1e-12), X.T @ DY) is None


@pytest.mark.parametrize(
    "got, expected_cls",
    [
        (-(X.T @ DY), "sign"),  # negated
        ((X.T @ DY) / 7, "scale"),  # divided by the batch
        ((X.T @ DY).T, "transpose"),  # (4, 5) instead of (5, 4)
        (X[:, :, None] * DY[:, None, :], "batch-reduction"),  # per-sample outer products kept
        ((X.T @ DY).reshape(1, 5, 4), "shape"),  # extra size-1 axis with the right values: keepdim
        (torch.zeros(3, 3, dtype=torch.float64), "shape"),
        (torch.full((5, 4), float("nan"), dtype=torch.float64), "non-finite"),
        (torch.randn(5, 4, generator=g, dtype=torch.float64), "wrong-values"),
    ],
)
def test_each_class_is_recognised(got, expected_cls):
    assert cls_of(got, X.T @ DY) == expected_cls


def test_square_transpose_is_recognised_with_the_right_shape():
    expected = X.T @ X  # symmetric: a transpose could not be seen...
    assert cls_of(expected.T, expected) is None
    square = X[:5].T @ X[:5] + torch.triu(torch.ones(5, 5, dtype=torch.float64))  # ...so use a non-symmetric one
    assert cls_of(square.T, square) == "transpose"


def test_a_scale_equal_to_the_batch_says_so():
    failure = diagnose("dW", (X.T @ DY) * 7, X.T @ DY, batch=7)
    assert failure.cls == "scale" and "batch size" in failure.sentence


def test_a_specific_alternative_wins_over_generic_classes():
    wrong_axis = DY.sum(0)[:4] * 0 + DY[:, :4].sum(0) + 1
    alt = Alternative("broadcast-axis", "summed over the wrong axis", wrong_axis)
    assert diagnose("db", wrong_axis, DY.sum(0), alternatives=[alt]).cls == "broadcast-axis"


def test_message_starts_with_the_diagnosis_and_says_where():
    failure = diagnose("dw", -(X.T @ DY), X.T @ DY, case="batch 7, x (7, 5)")
    lines = str(failure).splitlines()
    assert lines[0].startswith("diagnosis: sign — ")
    assert lines[1].startswith("first mismatch at dw[0, 0]: expected ")
    assert "relative error of dw: 2.00e+00" in str(failure)
    assert "inputs: batch 7, x (7, 5)" in str(failure)


def test_every_class_in_the_vocabulary_can_be_raised_and_unknown_ones_cannot():
    for cls in CLASSES:
        assert str(GradingFailure(cls, "s")).startswith(f"diagnosis: {cls} — s")
    with pytest.raises(ValueError):
        GradingFailure("typo", "s")


def test_relative_error_is_measured_against_the_reference_and_safe_at_zero():
    """The checker's measure is not notebook 00's Part B (symmetric): the second argument is the truth."""
    assert relative_error(X, X) == 0.0
    assert relative_error(torch.zeros(3), torch.zeros(3)) == 0.0
    assert relative_error(torch.zeros_like(X), X) == 1.0 and relative_error(-X, X) == pytest.approx(2.0)
    assert relative_error(2 * X, X) == pytest.approx(1.0) and relative_error(X, 2 * X) == pytest.approx(0.5)


def test_call_student_turns_failures_into_diagnoses():
    def stub(x):
        raise NotImplementedError

    def crashes(x):
        y = x @ torch.ones(3, 3)  # a shape error on this line
        return y

    def uses_autograd(x):
        x = x.clone().requires_grad_()
        (x ** 2).sum().backward()
        return x.grad

    def hides_autograd(x):
        try:
            return torch.autograd.grad((x.clone().requires_grad_() ** 2).sum(), x)
        except Exception:
            return 2 * x

    with pytest.raises(GradingFailure, match="not-implemented"):
        call_student("f", stub, X)
    with pytest.raises(GradingFailure) as info:
        call_student("f", crashes, X)
    assert info.value.cls == "error" and "a shape error on this line" in str(info.value)
    for fn in (uses_autograd, hides_autograd):
        with pytest.raises(GradingFailure, match="autograd-in-backward"):
            call_student("f", fn, X)
    assert torch.autograd.grad  # the guard restored autograd afterwards
    x = X.clone().requires_grad_()
    (x ** 2).sum().backward()
    assert torch.allclose(x.grad, 2 * X)


def test_run_cases_calls_a_wrong_batch_7_answer_a_missing_batch_reduction():
    ref = lambda x, dy: x.T @ dy  # noqa: E731
    only_first = lambda x, dy: x[:1].T @ dy[:1]  # noqa: E731
    cases = [Case("batch 1", (X[:1], DY[:1]), 1), Case("batch 7", (X, DY), 7)]
    run_cases("f", ref, cases, ref, outputs=("dw",))
    with pytest.raises(GradingFailure) as info:
        run_cases("f", only_first, cases, ref, outputs=("dw",))
    assert info.value.cls == "batch-reduction"
    with pytest.raises(GradingFailure, match="must return 2 gradients"):
        run_cases("f", ref, cases, lambda x, dy: (x, dy), outputs=("dx", "dy"))


def test_run_cases_hands_a_refinement_what_the_cases_before_showed():
    ref = lambda x, dy: x.T @ dy  # noqa: E731
    layout_bound = lambda x, dy: (x.T @ dy) * (2.0 if not x.is_contiguous() else 1.0)  # noqa: E731
    cases = [Case("batch 1", (X[:1], DY[:1]), 1), Case("batch 7", (X, DY), 7),
             Case("batch 7, transposed", (transposed_view(X), transposed_view(DY)), 7)]
    seen = []

    def refine(failure, out, case, got, expected, passed):
        seen.append((out, case.label, passed.batch1, passed.contiguous, got[0].shape == expected[0].shape))
        return GradingFailure("wrong-values", "the layout", failure.where)

    with pytest.raises(GradingFailure, match="the layout"):
        run_cases("f", layout_bound, cases, ref, outputs=("dw",), refine=refine)
    assert seen == [("dw", "batch 7, transposed", True, True, True)]


def test_run_cases_reports_shapes_where_the_classifier_cannot_compare():
    def alternatives(case):
        raise RuntimeError("the alternatives assume the right shape")

    cases = [Case("batch 7", (X, DY), 7)]
    with pytest.raises(GradingFailure) as info:
        run_cases("f", lambda x, dy: dy.T @ x, cases, lambda x, dy: x.T @ dy, outputs=("dw",), of=("w",),
                  alternatives=alternatives)
    assert (info.value.cls, info.value.sentence) == ("shape", "dw has shape (4, 5) but must be (5, 4), the shape of w.")


def test_an_exercise_runs_its_cases_as_run_cases_does():
    ref = lambda x, dy: x.T @ dy  # noqa: E731
    cases = [Case("batch 1", (X[:1], DY[:1]), 1), Case("batch 7", (X, DY), 7)]
    halved = lambda case: {"dw": [Alternative("wrong-values", "a halved dw", 0.5 * ref(*case.args))]}  # noqa: E731
    exercise = Exercise(name="f", reference=ref, outputs=("dw",), of=("w",), alternatives=halved)
    exercise.run(ref, cases)
    with pytest.raises(GradingFailure) as info:  # the exercise's own named bug, before the generic scale
        exercise.run(lambda x, dy: 0.5 * ref(x, dy), cases)
    assert (info.value.cls, info.value.sentence) == ("wrong-values", "a halved dw")
    with pytest.raises(GradingFailure) as info:  # alternatives given to run take the place of its own
        exercise.run(lambda x, dy: 0.5 * ref(x, dy), cases, alternatives=lambda case: {})
    assert info.value.cls == "scale"
    with pytest.raises(GradingFailure) as info:  # "of" reaches the shape message
        exercise.run(lambda x, dy: ref(x, dy)[:, :3], cases[1:])
    assert info.value.sentence == "dw has shape (5, 3) but must be (5, 4), the shape of w."
    with pytest.raises(GradingFailure, match="refined"):  # hooks go to run_cases as they are
        exercise.run(lambda x, dy: ref(x, dy) + 1.0, cases,
                     refine=lambda failure, *rest: GradingFailure("wrong-values", "refined"))
    Exercise(name="f", reference=ref, outputs=("dw",), tol=1.0).run(lambda x, dy: ref(x, dy) + 1e-3, cases)


def test_every_pytorch_exercise_of_the_lessons_is_one_spec_type():
    from course.selfcheck import layernorm, matmul, routing, softmax, vjp_contract

    declared = [softmax.JACOBIAN, softmax.BACKWARD, softmax.SHIFT, softmax.CE, layernorm.FORWARD, layernorm.BACKWARD,
                layernorm.RMS, *routing.EXERCISES.values(), *matmul.EXERCISES.values(), vjp_contract.LSCE]
    assert all(isinstance(ex, Exercise) for ex in declared)
    assert len({ex.name for ex in declared}) == len(declared)


def test_a_batch_refinement_needs_batch_1_passed_and_an_unexplained_failure():
    generic = diagnose("dw", X.T @ DY + 1.0, X.T @ DY)
    named = GradingFailure("wrong-values", "a named bug")
    assert batch_refined(generic, "dw", 7, True).cls == "batch-reduction"
    assert batch_refined(generic, "dw", 7, False) is generic and batch_refined(generic, "dw", 1, True) is generic
    assert batch_refined(named, "dw", 7, True) is named
    assert batch_refined(named, "dw", 7, True, "why.", named=True).sentence == \
        "dw is right at batch 1 and wrong at batch 7: why."


def test_a_shape_failure_at_batch_1_is_looked_at_again_above_it():
    cases = [Case("batch 1", (), 1), Case("batch 7", (), 7)]

    def attempt(some):
        raise GradingFailure("shape" if some[0].batch == 1 else "batch-reduction", "x")

    with pytest.raises(GradingFailure) as info:
        rerun_above_batch_1(attempt, cases)
    assert info.value.cls == "batch-reduction"
    with pytest.raises(GradingFailure) as info:
        rerun_above_batch_1(lambda some: (_ for _ in ()).throw(GradingFailure("shape", "x")), cases)
    assert info.value.cls == "shape"


def test_student_input_edits_do_not_reach_the_reference():
    def edits_in_place(x, dy):
        out = x.T @ dy
        x.zero_()
        return out

    cases = [Case("batch 7", (X, DY), 7)]
    run_cases("f", edits_in_place, cases, lambda x, dy: x.T @ dy, outputs=("dw",))
    assert X.abs().sum() > 0


def test_graded_hides_the_checker_frames():
    @graded
    def check(fn):
        raise GradingFailure("sign", "negated")

    with pytest.raises(GradingFailure) as info:
        check(None)
    assert info.value.__cause__ is None and info.value.__context__ is None


def test_a_failure_points_to_the_hint_for_its_topic_then_its_class_then_any():
    from course.diagnose import GradingFailure, hint_for, with_hint

    table = {"sign": 2, "procedure": 3, "*": 1}
    assert hint_for(GradingFailure("sign", "s"), table) == 2
    assert hint_for(GradingFailure("wrong-values", "s", topic="procedure"), table) == 3
    assert hint_for(GradingFailure("scale", "s"), table) == 1
    assert hint_for(GradingFailure("not-implemented", "s"), table) is None  # nothing derived yet
    assert hint_for(GradingFailure("sign", "s"), {}) is None  # a check that is no exercise
    pointed = with_hint(GradingFailure("sign", "s", "first mismatch at x[0]"), 2)
    assert str(pointed).splitlines() == ["diagnosis: sign — s", "first mismatch at x[0]",
                                         "→ Hint 2, just above this test cell, is about this kind of bug."]
