"""04_layernorm: the checks name this lesson's bugs, and can fail.

The solution, the release stubs and each mutant's diagnosis are checked for every lesson
in ``test_samples.py``. Every check is run twice where it matters: the hidden one
(``autograder.check``, random inputs — several seeds, since grading draws a fresh one each
run) and the visible one (``course.selfcheck``, fixed inputs). Warnings are errors in this module: a warning in a test cell writes to
stderr, and nbgrader scores such a cell zero.
"""

from __future__ import annotations

import functools

import pytest
import torch

import autograder.check as hidden
import course.selfcheck as visible
from autograder.check.layernorm import _ln_backward, _rms_backward
from autograder.inputs import generator, randn
from course.diagnose import GradingFailure, relative_error
from course.selfcheck.layernorm import (
    BACKWARD,
    F32,
    F64,
    FORWARD,
    KERNEL_SPEC,
    backward_case,
    backward_reference,
    forward_case,
    forward_reference,
    kernel_case,
    layernorm_reference,
    rms_case,
    rms_reference,
    row_stats,
)
from tests.support import assert_crash_quotes_the_line, diagnosis, edited_solution, failure_of, solutions, with_cells
from tools.mutants import mutants

pytestmark = pytest.mark.filterwarnings("error")

ASSIGNMENT = "04_layernorm"
EXERCISES = ("layernorm_forward", "layernorm_backward", "rmsnorm_backward", "TritonLayerNorm", "triton_layernorm")
MUTANTS = mutants(ASSIGNMENT)


# ---------------------------------------------------------------------------
# The notebook's code as plain functions (tests.support runs the given Triton forward first)


@functools.cache
def solution_namespace() -> dict:
    return solutions(ASSIGNMENT)


@pytest.fixture(scope="module")
def solution():
    return solution_namespace()


# ---------------------------------------------------------------------------
# The mutants (their diagnoses, for every lesson: test_samples.py)


def test_mutants_cover_the_bugs_this_lesson_is_about():
    expected = {(t.removeprefix("test_"), cls) for m in MUTANTS for t, cls in m.expect.items()}
    required = {
        ("layernorm_forward", "wrong-values"),  # N − 1 variance, ε outside the root, σ for rstd
        ("layernorm_forward", "shape"),  # mean and rstd with keepdim
        ("layernorm_backward", "batch-reduction"),  # γ̄ unreduced, γ̄ from one row
        ("layernorm_backward", "broadcast-axis"),  # c1, c2 without keepdim
        ("layernorm_backward", "wrong-values"),  # missing rstd
        ("layernorm_backward", "autograd-in-backward"),
        ("rmsnorm_backward", "sign"),
        ("rmsnorm_backward", "batch-reduction"),
        ("TritonLayerNorm", "batch-reduction"),  # no second pass; partial sums overwritten
        ("TritonLayerNorm", "autograd-in-backward"),
        ("TritonLayerNorm", "wrong-values"),  # x̂ saved
        ("TritonLayerNorm", "out-of-bounds"),  # loads without a mask
        ("TritonLayerNorm", "race"),  # every program adds into partial row 0
        ("TritonLayerNorm", "half-accumulation"),  # partial sums of γ̄, β̄ in float16
        ("triton_layernorm", "shape"),
    }
    assert required <= expected
    for m in MUTANTS:
        replaced = {f"test_{g}" for g in m.cells}
        # A broken kernel (in the TritonLayerNorm cell) also fails triton_layernorm, which launches it.
        cascade = {"test_triton_layernorm"} if "TritonLayerNorm" in m.cells else set()
        assert replaced <= set(m.expect) <= replaced | cascade, f"{m.name}: one expect line per replaced cell"
        assert m.description
    assert len(MUTANTS) <= 7


# ---------------------------------------------------------------------------
# Student exceptions


STUDENT_CELL = '''\
def layernorm_backward(dy, x, gamma, mean, rstd):
    xhat = (x - mean[..., None]) * rstd[..., None]
    wdy = gamma * dy
    c1 = (xhat * wdy).mean(dim=-1, keepdim=True)
    return (wdy - xhat * c1) * rstd[..., None], (dy * xhat).sum(0), dy.sum(0), dy.sum(1)[5]
'''


def test_an_exception_is_error_and_names_the_students_line():
    assert_crash_quotes_the_line((hidden.layernorm_backward, visible.layernorm_backward), STUDENT_CELL,
                                 "layernorm_backward", "<ipython-input-12>", "line 5: return")


# ---------------------------------------------------------------------------
# The references


def _forward(x, gamma, beta, eps=1e-5):
    """LayerNorm's forward in closed form: (y, μ, rstd)."""
    mean = x.mean(dim=-1)
    var = ((x - mean[..., None]) ** 2).mean(dim=-1)
    rstd = 1.0 / torch.sqrt(var + eps)
    return (x - mean[..., None]) * rstd[..., None] * gamma + beta, mean, rstd


def test_the_closed_form_references_agree_with_autograd():
    gen = generator("reference-test")
    for shape in [(1, 7), (7, 10), (3, 5, 6)]:
        N = shape[-1]
        x, gamma, beta, dy = randn(gen, *shape) * 2 + 1, randn(gen, N), randn(gen, N), randn(gen, *shape)
        for mine, ref in zip(_forward(x, gamma, beta, 0.01), forward_reference(x, gamma, beta, 0.01)):
            assert relative_error(mine, ref) < 1e-13
        mean, rstd = row_stats(x)
        for mine, ref in zip(_ln_backward(dy, x, gamma, mean, rstd), backward_reference(dy, x, gamma, mean, rstd)):
            assert relative_error(mine, ref) < 1e-12
        rrms = 1.0 / torch.sqrt((x * x).mean(-1) + 1e-6)
        for mine, ref in zip(_rms_backward(dy, x, gamma, rrms), rms_reference(dy, x, gamma, rrms)):
            assert relative_error(mine, ref) < 1e-12
        y, *grads = layernorm_reference(x.reshape(-1, N), gamma, beta, dy.reshape(-1, N))
        assert relative_error(y, _forward(x, gamma, beta)[0].reshape(-1, N)) < 1e-13
        for mine, ref in zip(_ln_backward(dy.reshape(-1, N), x.reshape(-1, N), gamma, mean.reshape(-1), rstd.reshape(-1)),
                             grads):
            assert relative_error(mine, ref) < 1e-12


def test_a_missing_rstd_is_far_from_the_right_answer_on_every_input(monkeypatch):
    """Rows are spread so that rstd is far from 1: x̄ without it is nowhere near x̄ with it, even at batch 1.

    A seed sweep, the hidden draws replayed for AUTOGRADER_SEED 0–1999 (grading draws a fresh seed). What
    grading relies on is that a missing rstd never comes within the check's tolerance, 1e-7. Measured here:
    the closest of 2000 draws is 2.4e-3 away, and 0.25% of draws come within 1e-2 — a density near 0 of about
    0.25 per unit of error, so a draw within 1e-7 has a probability of order 1e-8. The bound asserted,
    1e-4, is a thousand times the tolerance and twenty times below the closest draw seen.
    """
    def without_rstd_error(case) -> float:
        dx = backward_reference(*case.args)[0]
        return relative_error(dx / case.args[4][..., None], dx)

    visible = min(without_rstd_error(backward_case(torch.Generator().manual_seed(seed), 1, 5)) for seed in range(10))
    hidden = []
    for seed in range(2000):
        monkeypatch.setenv("AUTOGRADER_SEED", str(seed))
        hidden.append(without_rstd_error(backward_case(generator("rstd"), 1, 10)))
    assert visible > 1e-2, visible  # the visible inputs are fixed: far, always
    assert min(hidden) > 1e-4, min(hidden)  # the tolerance is 1e-7
    assert sum(h < 1e-2 for h in hidden) / len(hidden) < 0.01  # close calls stay rare, as measured


# ---------------------------------------------------------------------------
# Wrong answers that no mutant covers still fail, with the right class


def zeros_backward(dy, x, gamma, mean, rstd):
    return torch.zeros_like(x), torch.zeros_like(gamma), torch.zeros_like(gamma)


@pytest.mark.parametrize("name, wrong, cls", [
    ("layernorm_forward", lambda x, g, b, eps=1e-5: (torch.zeros_like(x), x.mean(-1), x.mean(-1)), "wrong-values"),
    ("layernorm_forward", lambda x, g, b, eps=1e-5: torch.zeros_like(x), "shape"),  # one output, not three
    ("layernorm_backward", zeros_backward, "wrong-values"),
    ("layernorm_backward", lambda *a: zeros_backward(*a)[:2], "shape"),
    ("rmsnorm_backward", lambda dy, x, g, r: (torch.zeros_like(x), torch.zeros_like(g)), "wrong-values"),
])
def test_trivially_wrong_answers_fail(name, wrong, cls, seeded):
    assert diagnosis(getattr(hidden, name), wrong) == cls
    assert diagnosis(getattr(visible, name), wrong) == cls


def with_solution(name: str, edit):
    """The solution of ``name`` with its outputs passed through ``edit``."""
    fn = solution_namespace()[name]

    def edited(*args, **kwargs):
        return edit(*fn(*args, **kwargs))

    return edited


def test_a_keepdim_dgamma_is_shape_not_batch_reduction(seeded):
    fn = with_solution("layernorm_backward", lambda dx, dg, db: (dx, dg[None, :], db))  # (1, N): a kept size-1 axis
    assert diagnosis(hidden.layernorm_backward, fn) == "shape"
    assert diagnosis(visible.layernorm_backward, fn) == "shape"


def test_a_mean_over_rows_for_dgamma_is_a_scale_by_the_batch(seeded):
    def mean_not_sum(dy, x, gamma, mean, rstd):
        dx, dg, db = solution_namespace()["layernorm_backward"](dy, x, gamma, mean, rstd)
        rows = x.numel() // x.shape[-1]
        return dx, dg / rows, db
    with pytest.raises(GradingFailure, match="1/the batch size") as info:
        hidden.layernorm_backward(mean_not_sum)
    assert info.value.cls == "scale"


def keepdim_forgotten(dy, x, gamma, mean, rstd):
    xhat = (x - mean[..., None]) * rstd[..., None]
    wdy = gamma * dy
    c1, c2 = (xhat * wdy).mean(-1), wdy.mean(-1)  # (...,): broadcast along the last axis
    N = x.shape[-1]
    return (wdy - (xhat * c1 + c2)) * rstd[..., None], (dy * xhat).reshape(-1, N).sum(0), dy.reshape(-1, N).sum(0)


def test_a_broadcasting_error_from_a_forgotten_keepdim_is_broadcast_axis():
    """Without a square case the bug raises instead of giving wrong values; it is named the same."""
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(GradingFailure, match="size-1 last axis") as info:
        BACKWARD.run(keepdim_forgotten, [backward_case(gen, 1, 5), backward_case(gen, 7, 13)])
    assert info.value.cls == "broadcast-axis"
    assert "return (wdy - (xhat * c1 + c2))" in str(info.value), "the student's line is shown"


def test_c1_and_c2_reduced_over_a_batch_axis_are_broadcast_axis(seeded):
    def over_axis_0(dy, x, gamma, mean, rstd):
        xhat = (x - mean[..., None]) * rstd[..., None]
        wdy = gamma * dy
        c1, c2 = (xhat * wdy).mean(0, keepdim=True), wdy.mean(0, keepdim=True)  # down the columns
        N = x.shape[-1]
        return (wdy - (xhat * c1 + c2)) * rstd[..., None], (dy * xhat).reshape(-1, N).sum(0), dy.reshape(-1, N).sum(0)

    for check in (hidden.layernorm_backward, visible.layernorm_backward):
        with pytest.raises(GradingFailure, match="reduced over axis 0") as info:
            check(over_axis_0)
        assert info.value.cls == "broadcast-axis"


def test_statistics_over_the_whole_tensor_are_broadcast_axis(seeded):
    def global_stats(x, gamma, beta, eps=1e-5):
        mean = x.mean().expand(x.shape[:-1])
        rstd = torch.rsqrt(x.var(correction=0) + eps).expand(x.shape[:-1])
        return (x - mean[..., None]) * rstd[..., None] * gamma + beta, mean, rstd

    assert diagnosis(hidden.layernorm_forward, global_stats) == "broadcast-axis"
    assert diagnosis(visible.layernorm_forward, global_stats) == "broadcast-axis"


def plain_forward(x, gamma, beta, eps=1e-5):
    """LayerNorm's forward in plain torch: a student's function must not call the course's own helpers."""
    mean = x.mean(dim=-1)
    rstd = torch.rsqrt(x.var(dim=-1, correction=0) + eps)
    return (x - mean[..., None]) * rstd[..., None] * gamma + beta, mean, rstd


def test_an_ignored_eps_is_named(seeded):
    def ignores_eps(x, gamma, beta, eps=1e-5):
        return plain_forward(x, gamma, beta)  # always 1e-5

    for check in (hidden.layernorm_forward, visible.layernorm_forward):
        with pytest.raises(GradingFailure, match="ignores its eps"):
            check(ignores_eps)


def test_flat_statistics_for_a_3d_input_are_shape():
    def flat(x, gamma, beta, eps=1e-5):
        y, mean, rstd = plain_forward(x, gamma, beta, eps)
        return y, mean.reshape(-1), rstd.reshape(-1)

    gen = torch.Generator().manual_seed(2)
    with pytest.raises(GradingFailure, match="keeps x's leading shape") as info:
        FORWARD.run(flat, [forward_case(gen, 1, 5), forward_case(gen, 2, 3, 7)])
    assert info.value.cls == "shape"


@pytest.mark.parametrize("variant, sentence", [
    ("swap", "c1 and c2 swapped"),
    ("c1", "missing the x̂·c1 term"),
    ("c2", "missing c2"),
])
def test_hidden_names_the_formula_slips(variant, sentence, seeded):
    from autograder.check.layernorm import _ln_dx

    def slipped(dy, x, gamma, mean, rstd):
        dx = _ln_dx(dy, x, gamma, mean, rstd, swap=variant == "swap", drop=None if variant == "swap" else variant)
        return (dx, *_ln_backward(dy, x, gamma, mean, rstd)[1:])

    with pytest.raises(GradingFailure, match=sentence) as info:
        hidden.layernorm_backward(slipped)
    assert info.value.cls == "wrong-values"


def test_rms_with_a_sum_for_the_mean_is_named(seeded):
    def summed(dy, x, g, rrms):
        return _rms_backward(dy, x, g, rrms, sum_not_mean=True)

    with pytest.raises(GradingFailure, match="the mean is needed"):
        hidden.rmsnorm_backward(summed)
    assert diagnosis(visible.rmsnorm_backward, summed) == "wrong-values"


def test_autograd_inside_rmsnorm_backward_is_refused():
    def with_autograd(dy, x, g, rrms):
        x, g = x.clone().requires_grad_(True), g.clone().requires_grad_(True)
        y = x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + 1e-6) * g
        return torch.autograd.grad(y, (x, g), dy)

    assert diagnosis(visible.rmsnorm_backward, with_autograd) == "autograd-in-backward"


def test_rms_cases_are_square_once():
    gen = torch.Generator().manual_seed(0)
    assert rms_case(gen, 7, 7).args[1].shape == (7, 7)


# ---------------------------------------------------------------------------
# The kernel check, on kernel bugs no mutant carries

def kernel_ending_at(last: str):
    """The solution's layernorm_bwd_kernel, each program's rows ending before ``last``."""
    cell = edited_solution(ASSIGNMENT, "TritonLayerNorm", f"""
-    last = tl.minimum(first + rows_per_program, n_rows)  # the last program may have fewer rows
+    last = {last}
""", "layernorm_bwd_kernel")
    return with_cells(ASSIGNMENT, {"TritonLayerNorm": cell}, f"last = {last}")["layernorm_bwd_kernel"]


LOOPS = {  # the row after each program's last
    "right": "tl.minimum(first + rows_per_program, n_rows)",
    "first row only": "first + 1",
    "past the last row": "first + rows_per_program",
}


def visible_kernel_cases():
    gen = torch.Generator().manual_seed(9)
    return [kernel_case(gen, 1, 8, 1), kernel_case(gen, 7, 13, 3), kernel_case(gen, 7, 13, 3, F32)]


@pytest.mark.parametrize("loop, match, classes", [
    ("right", None, ()),
    ("first row only", "never wrote x̄ for row", ("wrong-values", "non-finite")),
    # The sanitizer names the last program's rows past n_rows; on a GPU (nothing recorded) the sentinels do.
    ("past the last row", r"loads Mean_ptr \+ \d+ in program .* past the last element of Mean_ptr", ("out-of-bounds",)),
])
def test_the_kernel_check_names_loop_bugs(loop, match, classes):
    kernel = kernel_ending_at(LOOPS[loop])
    if match is None:
        KERNEL_SPEC.check(kernel, visible_kernel_cases())
        return
    with pytest.raises(GradingFailure, match=match) as info:
        KERNEL_SPEC.check(kernel, visible_kernel_cases())
    assert info.value.cls in classes


def test_without_the_sanitizer_rows_past_the_last_are_named_by_the_sentinels(unsanitized):
    with pytest.raises(GradingFailure, match="writes past the end") as info:
        KERNEL_SPEC.check(kernel_ending_at(LOOPS["past the last row"]), visible_kernel_cases())
    assert info.value.cls in ("wrong-values", "non-finite")


def test_a_kernel_that_is_not_jitted_is_named(solution):
    assert diagnosis(lambda k: KERNEL_SPEC.check(k, visible_kernel_cases()), lambda *a: None) == "error"
    namespace = dict(solution["TritonLayerNorm"].forward.__globals__)
    assert "layernorm_bwd_kernel" in namespace


def test_the_float64_kernel_check_is_tight_and_float32_is_loose():
    """The tolerance per dtype sits far from the error of a right kernel in that dtype."""
    from course.selfcheck.layernorm import TRITON_TOL, launch_kernel

    kernel = solution_namespace()["layernorm_bwd_kernel"]
    gen = torch.Generator().manual_seed(11)
    for dtype in (F64, F32):
        case = kernel_case(gen, 7, 13, 3, dtype)
        dx = launch_kernel(kernel, case).got["dx"]
        x = case.x.to(dtype).to(F64)
        mean, rstd = row_stats(x)
        err = relative_error(dx, backward_reference(case.dy.to(dtype).to(F64), x, case.gamma.to(dtype).to(F64), mean, rstd)[0])
        assert err < TRITON_TOL[dtype] / 10, (dtype, err)


# ---------------------------------------------------------------------------
# A transposed (non-contiguous) input in every check


def test_every_pytorch_check_has_a_transposed_input(seeded):
    from autograder.check.layernorm import BACKWARD_SHAPES, FORWARD_SHAPES
    from course.selfcheck import layernorm as visible

    gen = torch.Generator().manual_seed(0)
    for spec, shapes, hidden_shapes in ((FORWARD, visible.FORWARD_SHAPES, FORWARD_SHAPES),
                                        (BACKWARD, visible.BACKWARD_SHAPES, BACKWARD_SHAPES),
                                        (visible.RMS, visible.RMS_SHAPES, BACKWARD_SHAPES)):
        transposed = [row for row in shapes if isinstance(row[-1], dict) and row[-1].get("transposed")]
        hidden_transposed = [row for row in hidden_shapes if isinstance(row[-1], dict) and row[-1].get("transposed")]
        assert transposed and hidden_transposed, spec.name
        for case in spec.cases(gen, transposed) + spec.cases(generator("t"), hidden_transposed):

            x = case.args[0] if len(case.args) == 3 else case.args[1]  # the forward's first argument, the backward's second
            assert not x.is_contiguous() and "transposed" in case.label
            with pytest.raises(RuntimeError):
                x.view(-1, x.shape[-1])  # the layout bug this case is there to catch


def view_backward(dy, x, gamma, mean, rstd):
    """Right for contiguous inputs; .view cannot flatten a transposed one."""
    N = x.shape[-1]
    xhat = (x - mean[..., None]) * rstd[..., None]
    dxhat = gamma * dy
    c1, c2 = (xhat * dxhat).mean(-1, keepdim=True), dxhat.mean(-1, keepdim=True)
    dx = (dxhat - (xhat * c1 + c2)) * rstd[..., None]
    return dx, (dy * xhat).view(-1, N).sum(0), dy.view(-1, N).sum(0)


def test_a_layout_dependent_backward_fails_on_the_transposed_case(seeded):
    for check in (hidden.layernorm_backward, visible.layernorm_backward):
        with pytest.raises(GradingFailure, match="transposed") as info:
            check(view_backward)
        assert info.value.cls == "error"
        assert "view(-1, N)" in str(info.value), "the student's own line is shown"


def test_a_wrong_answer_only_for_a_transposed_input_is_named_a_layout_bug():
    def layout_bound(x, gamma, beta, eps=1e-5):
        y, mean, rstd = plain_forward(x, gamma, beta, eps)
        return (y if x.is_contiguous() else y + 1.0), mean, rstd

    with pytest.raises(GradingFailure, match="laid out in memory") as info:
        visible.layernorm_forward(layout_bound)
    assert info.value.cls == "wrong-values"


# ---------------------------------------------------------------------------
# Half precision: the sums over rows are held in float32


def class_with_partials_in(dtype_expr: str):
    """The solution's TritonLayerNorm with its partial-sum buffers allocated in ``dtype_expr``."""
    cell = edited_solution(ASSIGNMENT, "TritonLayerNorm", f"""
-        dgamma_partial = torch.zeros(n_programs, n_cols, dtype=mean.dtype, device=x.device)
-        dbeta_partial = torch.zeros(n_programs, n_cols, dtype=mean.dtype, device=x.device)
+        dgamma_partial = torch.zeros(n_programs, n_cols, dtype={dtype_expr}, device=x.device)
+        dbeta_partial = torch.zeros(n_programs, n_cols, dtype={dtype_expr}, device=x.device)
""", "TritonLayerNorm")
    return with_cells(ASSIGNMENT, {"TritonLayerNorm": cell}, f"partials in {dtype_expr}")["TritonLayerNorm"]


def test_the_forward_saves_float32_statistics_for_float16_x(solution):
    x = torch.randn(5, 7, dtype=torch.float16)
    w = torch.ones(7, dtype=torch.float16)
    y, mean, rstd = solution["layernorm_fwd"](x, w, torch.zeros_like(w), 1e-5)
    assert (y.dtype, mean.dtype, rstd.dtype) == (torch.float16, F32, F32)
    assert solution["layernorm_fwd"](x.double(), w.double(), w.double(), 1e-5)[1].dtype == F64


def test_float16_partial_sums_are_half_accumulation_and_float32_ones_pass(solution):
    """The solution (float32 buffers) passes both checks; the same class with buffers in x's dtype is
    half-accumulation in both. The check measures the error, so a float32 buffer is what makes the difference."""
    half = class_with_partials_in("x.dtype")
    for check in (hidden.TritonLayerNorm, visible.TritonLayerNorm):
        assert diagnosis(check, solution["TritonLayerNorm"]) == "pass"
        failure = failure_of(check, half)
        assert failure.cls == "half-accumulation"
        assert "float16" in failure.sentence and "roundings" in failure.sentence


def test_the_half_precision_bound_sits_between_one_rounding_and_a_float16_running_sum(solution):
    """On three seeds and both shapes: float32 partials within one float16 rounding (the theory's bound), float16
    partials beyond three; the check allows two. Measured on seeds 0-7 (each case holds 128 or 160 rows of sums, so
    one seed already draws many): float32 partials 0.6-0.9 roundings, float16 ones 8.7-11.9; a seed costs 4 s in the
    interpreter, so three hold the bound."""
    from course.selfcheck.layernorm import HALF_ROUNDINGS, HALF_U, check_half_accumulation, half_case

    half = class_with_partials_in("x.dtype")
    for seed in range(3):
        for shape in ((128, 8), (160, 12)):
            case = half_case(torch.Generator().manual_seed(seed), *shape)
            check_half_accumulation("TritonLayerNorm", solution["TritonLayerNorm"].apply, case)
            with pytest.raises(GradingFailure) as info:
                check_half_accumulation("TritonLayerNorm", half.apply, case)
            worst = float(info.value.sentence.split("off by ")[1].split()[0])
            assert worst > 1.5 * HALF_ROUNDINGS, (seed, shape, worst)
    assert HALF_U == 2.0 ** -11
