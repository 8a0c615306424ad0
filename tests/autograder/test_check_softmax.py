"""The checks of 02_softmax_collapse: the references, the mutants' coverage, the memory property; every check can fail.

Both the hidden checks (``autograder.check.softmax``) and the visible ones
(``course.selfcheck.softmax``) run on the same functions: a student reads the same
diagnosis before submitting as after. ``softmax_backward`` is also graded on what it
allocates: building an N×N tensor is ``materialized-jacobian`` even with the right values.
The solution, the release stubs and each mutant's diagnosis are checked for every lesson
in ``test_samples.py``.
"""

import pytest
import torch

import autograder.check.softmax as hidden
import course.selfcheck.softmax as visible
from tests.support import failure_of, solutions
from tools.mutants import mutants

SLUG = "02_softmax_collapse"
FUNCTIONS = ["softmax_jacobian", "softmax_backward", "shifted_softmax_vjp", "softmax_cross_entropy_backward",
             "log_softmax_backward"]
SOLUTION = solutions(SLUG)
MUTANTS = mutants(SLUG)
F64 = torch.float64

# The bug classes each exercise must have a mutant for (the list, where it applies).
REQUIRED = {
    "softmax_jacobian": {"sign", "broadcast-axis"},
    "softmax_backward": {"materialized-jacobian", "broadcast-axis", "sign"},
    "shifted_softmax_vjp": {"non-finite", "broadcast-axis", "wrong-values", "shape"},
    "softmax_cross_entropy_backward": {"scale", "broadcast-axis", "batch-reduction", "non-finite"},
    "log_softmax_backward": {"wrong-values", "broadcast-axis", "materialized-jacobian", "sign"},
}


def both(name: str):
    return [getattr(hidden, name), getattr(visible, name)]


# ---------------------------------------------------------------------------
# The references


def jacobian_closed_form(y):
    """J = diag(y) − y yᵀ for every row: (..., N) -> (..., N, N)."""
    return torch.diag_embed(y) - torch.einsum("...i,...j->...ij", y, y)


def backward_closed_form(y, dy):
    """x̄ = y ⊙ (ȳ − ⟨y, ȳ⟩), the hub taken along each row."""
    return y * (dy - torch.einsum("...n,...n->...", y, dy).unsqueeze(-1))


def shift_closed_form(x, c, dy):
    """y = softmax(x − c) = softmax(x); x̄ = y ⊙ (ȳ − ⟨y, ȳ⟩), the same for every c; c̄ = −1ᵀ J ȳ = 0."""
    y = torch.log_softmax(x.to(F64), dim=-1).exp()
    return y, backward_closed_form(y, dy.to(F64)), torch.zeros(c.shape, dtype=F64)


def log_softmax_closed_form(z, dz):
    """x̄ = z̄ − e^z Σ_i z̄_i: the shift L's gradient, Σ z̄, sent back in proportion to softmax(x) = e^z."""
    return dz - z.exp() * dz.sum(-1, keepdim=True)


def ce_closed_form(logits, target):
    """(softmax(logits) − onehot(target)) / M, with M every row over every leading axis."""
    C = logits.shape[-1]
    probs = torch.log_softmax(logits, dim=-1).exp()  # stable however large the logits
    return (probs - torch.nn.functional.one_hot(target, C).to(logits.dtype)) / visible.rows_of(logits.shape)


def test_the_autograd_references_agree_with_the_closed_forms():
    """Both checks compare with autograd (the visible module ships no closed form): hold it to the derivation."""
    gen = torch.Generator().manual_seed(0)
    x, dy = torch.randn(2, 3, 7, generator=gen, dtype=F64), torch.randn(2, 3, 7, generator=gen, dtype=F64)
    y = torch.softmax(x, -1)
    assert torch.allclose(jacobian_closed_form(y), visible._jacobian_reference(y))
    assert torch.allclose(backward_closed_form(y, dy), visible._backward_reference(y, dy))
    target = torch.randint(0, 7, (2, 3), generator=gen)
    for logits, t in [(x, target), visible.saturated_logits(x)]:
        assert torch.allclose(ce_closed_form(logits, t), visible._ce_reference(logits, t), atol=1e-15)
    c = torch.randn(2, 3, 1, generator=gen, dtype=F64)
    for got, want in zip(shift_closed_form(x, c, dy), visible._shift_reference(x, c, dy)):
        assert torch.allclose(got, want, atol=1e-15)
    z = torch.log_softmax(x, -1)
    assert torch.allclose(log_softmax_closed_form(z, dy), visible._log_softmax_reference(z, dy))
    assert torch.allclose(visible._log_softmax_reference(z, dy), vjp_at_logits(x, dy))


def vjp_at_logits(x, dz):
    """Autograd of log_softmax at the logits x themselves: what the reference at z must equal."""
    leaf = x.clone().requires_grad_(True)
    return torch.autograd.grad(torch.log_softmax(leaf, -1), leaf, dz)[0]


def test_the_ce_reference_is_the_loss_on_the_flattened_rows():
    """F.cross_entropy reads axis 1 as the classes: on (B, T, C) logits it raises, so the checks flatten."""
    logits, target = torch.randn(2, 3, 5, dtype=F64), torch.randint(0, 5, (2, 3))
    with pytest.raises((RuntimeError, ValueError)):
        torch.nn.functional.cross_entropy(logits, target)
    flat = logits.reshape(-1, 5).clone().requires_grad_(True)
    torch.nn.functional.cross_entropy(flat, target.reshape(-1)).backward()
    assert torch.allclose(visible._ce_reference(logits, target), flat.grad.reshape(logits.shape))
    assert torch.allclose(ce_closed_form(logits, target), flat.grad.reshape(logits.shape))


def test_every_check_has_a_transposed_input():
    gen = torch.Generator().manual_seed(0)
    for side, logits in ((visible, visible.normal), (hidden, hidden.logits)):
        log_softmax_shapes = getattr(side, "LOG_SOFTMAX_SHAPES", visible.BACKWARD_SHAPES)  # the visible side reuses B's
        for exercise, shapes in [(visible.JACOBIAN, side.JACOBIAN_SHAPES), (visible.BACKWARD, side.BACKWARD_SHAPES),
                                 (visible.SHIFT, side.SHIFT_SHAPES), (visible.CE, side.CE_SHAPES),
                                 (visible.LOG_SOFTMAX, log_softmax_shapes)]:
            cases = exercise.cases(gen, shapes, logits=logits)

            assert any(not a.is_contiguous() for case in cases for a in case.args if isinstance(a, torch.Tensor)), \
                (side.__name__, exercise.name)


# ---------------------------------------------------------------------------
# The mutants


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
# Exceptions, autograd, and the memory property


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
        n = y.shape[-1]
        rows = [y_r * (dy_r - s_r) for y_r, dy_r, s_r in zip(y.reshape(-1, n), dy.reshape(-1, n), s.reshape(-1, n))]
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


# ---------------------------------------------------------------------------
# The free shift


def _shifted(dc=None, forward=None):
    """A shifted_softmax_vjp with the right backward, and the given forward and dc."""
    def shifted_softmax_vjp(x, c, dy):
        y = forward(x, c) if forward else None
        if y is None:
            e = (x - x.amax(dim=-1, keepdim=True)).exp()
            y = e / e.sum(dim=-1, keepdim=True)
        s = (y * dy).sum(dim=-1, keepdim=True)
        dx = y * (dy - s)
        return y, dx, dc(y, dx, dy, c) if dc else torch.zeros_like(c)
    return shifted_softmax_vjp


def test_a_dc_computed_from_dx_passes_in_both_dtypes():
    fn = _shifted(dc=lambda y, dx, dy, c: -dx.sum(dim=-1, keepdim=True))  # zero up to rounding
    for check in both("shifted_softmax_vjp"):
        check(fn)


def test_the_named_dc_bugs():
    for dc, words in [
        (lambda y, dx, dy, c: -dy.sum(dim=-1, keepdim=True), "through the softmax"),
        (lambda y, dx, dy, c: (y * dy).sum(dim=-1, keepdim=True), "numerator"),
    ]:
        for check in both("shifted_softmax_vjp"):
            failure = failure_of(check, _shifted(dc=dc))
            assert failure.cls == "wrong-values" and words in str(failure), str(failure)


def test_torchs_own_softmax_is_refused_in_the_shift_exercise():
    for forward in (lambda x, c: torch.softmax(x - c, dim=-1), lambda x, c: (x - torch.logsumexp(x, -1, keepdim=True)).exp()):
        for check in both("shifted_softmax_vjp"):
            failure = failure_of(check, _shifted(forward=forward))
            assert failure.cls == "wrong-values" and "stabilising for you" in str(failure), str(failure)


def test_a_missing_shift_is_non_finite_and_says_why_not_how():
    fn = _shifted(forward=lambda x, c: (x - c).exp() / (x - c).exp().sum(dim=-1, keepdim=True))
    for check in both("shifted_softmax_vjp"):
        failure = failure_of(check, fn)
        assert failure.cls == "non-finite" and "float32" in str(failure) and "amax" not in str(failure)


# ---------------------------------------------------------------------------
# Log-softmax: a shift computed from x, whose gradient is not zero


def _log_softmax(term):
    """A log_softmax_backward that subtracts ``term(y, dz)`` from z̄, y = e^z."""
    def log_softmax_backward(z, dz):
        return dz - term(z.exp(), dz)
    return log_softmax_backward


def test_the_log_softmax_solution_passes_and_a_dropped_shift_gradient_is_named():
    right = _log_softmax(lambda y, dz: y * dz.sum(-1, keepdim=True))
    for check in both("log_softmax_backward"):
        check(right)
        failure = failure_of(check, lambda z, dz: dz.clone())  # L treated as a constant, as Part C's c could be
        assert failure.cls == "wrong-values" and "treated as a constant" in str(failure), str(failure)


def test_the_named_log_softmax_bugs():
    for term, cls, words in [
        (lambda y, dz: dz.sum(-1, keepdim=True) / dz.shape[-1], "wrong-values", "evenly"),
        (lambda y, dz: y * dz.sum(), "broadcast-axis", "whole batch"),
        (lambda y, dz: y * (y * dz).sum(-1, keepdim=True), "wrong-values", None),
    ]:
        for check in both("log_softmax_backward"):
            failure = failure_of(check, _log_softmax(term))
            assert failure.cls == cls and (words is None or words in str(failure)), str(failure)

    def softmax_backward_on_z(z, dz):  # Part B's answer used where z is the log of a softmax
        y = z.exp()
        return y * (dz - (y * dz).sum(-1, keepdim=True))

    for check in both("log_softmax_backward"):
        failure = failure_of(check, softmax_backward_on_z)
        assert failure.cls == "wrong-values" and "Part B" in str(failure), str(failure)


def test_the_log_softmax_jacobian_and_torchs_own_backward_are_refused():
    def dense(z, dz):
        J = torch.eye(z.shape[-1], dtype=z.dtype) - z.exp()[..., None, :]  # (..., N, N): ∂z_i/∂x_j
        return (J.mT @ dz[..., :, None])[..., 0]

    def library(z, dz):
        return torch.ops.aten._log_softmax_backward_data(dz, z, -1, z.dtype)

    for check in both("log_softmax_backward"):
        assert failure_of(check, dense).cls == "materialized-jacobian"
        failure = failure_of(check, library)
        assert failure.cls == "autograd-in-backward" and "backward kernel aten." in str(failure)
