"""Checks for 03_triton_fused_softmax: every bug is caught and named.

The kernels run in Triton's interpreter on the CPU (``import course`` turns it on), so sizes
stay small. The solution, the release stubs and each mutant's diagnosis are checked for
every lesson in ``test_samples.py``; here, half-finished notebooks (finished parts over stub
kernels) and a few more bugs, each one the visible and hidden checks should name in words.
"""


import pytest
import torch

import autograder.check as hidden
import course.selfcheck as visible
from tests.support import edited_solution, failure_of, solution_fixture, with_cells
from tools.mutants import mutants

SLUG = "03_triton_fused_softmax"
EXERCISES = ["softmax_fwd_kernel", "softmax_bwd_kernel", "TritonSoftmax", "triton_softmax"]
MUTANTS = mutants(SLUG)


solved = solution_fixture(SLUG, name="solved")


def variant(name: str, cells: dict[str, str]) -> dict:
    """The source solutions with some cells replaced, as a student's namespace."""
    return with_cells(SLUG, cells, name)


def test_there_are_mutants_and_each_breaks_something():
    assert 4 <= len(MUTANTS) <= 5
    for m in MUTANTS:
        assert m.expect and set(m.expect) <= {f"test_{e}" for e in EXERCISES}


STUBS = {
    "softmax_fwd_kernel": '''
import triton
import triton.language as tl


@triton.jit
def softmax_fwd_kernel(X_ptr, Y_ptr, x_row_stride, y_row_stride, n_cols, BLOCK: tl.constexpr):
    """y = e / ℓ."""
    # YOUR CODE HERE
    raise course.todo()''',
    "softmax_bwd_kernel": '''
@triton.jit
def softmax_bwd_kernel(DY_ptr, Y_ptr, DX_ptr, dy_row_stride, y_row_stride, dx_row_stride, n_cols, BLOCK: tl.constexpr):
    """x̄ = y ⊙ (ȳ − s)."""
    # YOUR CODE HERE
    raise course.todo()''',
    "TritonSoftmax": '''
class TritonSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        # YOUR CODE HERE
        raise course.todo()

    @staticmethod
    def backward(ctx, dy):
        # YOUR CODE HERE
        raise course.todo()''',
    "triton_softmax": '''
MAX_COLS = 8192


def triton_softmax(x):
    # YOUR CODE HERE
    raise course.todo()''',
}


def test_finished_parts_over_stub_kernels_say_which_kernel_is_missing():
    ns = variant("stub kernels", {k: STUBS[k] for k in ("softmax_fwd_kernel", "softmax_bwd_kernel")})
    for name in ("TritonSoftmax", "triton_softmax"):
        failure = failure_of(getattr(visible, name), ns[name])
        assert failure.cls == "not-implemented" and "softmax_fwd_kernel" in str(failure) and "Part A" in str(failure)


def test_a_forward_without_its_backward_reads_not_implemented(solved):
    forward_only = solved["TritonSoftmax"]
    stub = variant("stub backward", {"TritonSoftmax": STUBS["TritonSoftmax"]})["TritonSoftmax"]
    half = type("TritonSoftmax", (torch.autograd.Function,), {
        "forward": staticmethod(forward_only.forward), "backward": staticmethod(stub.backward)})
    for check in (visible.TritonSoftmax, hidden.TritonSoftmax):
        assert failure_of(check, half).cls == "not-implemented"


LOAD = '    x = tl.load(X_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf"))  # read N'
STORE = "    tl.store(Y_ptr + row * y_row_stride + cols, y, mask=mask)  # write N"
DX = "    dx = y * (dy - s)"
WIDEN_X = "    x = x.to(tl.float32) if x.dtype.primitive_bitwidth < 32 else x"
WIDEN_DY = "    dy = dy.to(tl.float32) if dy.dtype.primitive_bitwidth < 32 else dy"
WIDEN_Y = "    y = y.to(tl.float32) if y.dtype.primitive_bitwidth < 32 else y"
EXP = "    e = tl.exp(x - m)  # every exponent ≤ 0: no overflow"
STORE_DX = "    tl.store(DX_ptr + row * dx_row_stride + cols, dx, mask=mask)  # write N"


def _edited(name: str, *lines: tuple[str, str]) -> dict[str, str]:
    """The solution cell ``name`` with each (old, new) pair of its lines changed."""
    return {name: edited_solution(SLUG, name, "\n".join(f"-{old}\n+{new}" for old, new in lines))}


# (exercise, replacement cells, expected class, words the message must contain)
MORE_BUGS = {
    "unmasked store": ("softmax_bwd_kernel", _edited("softmax_bwd_kernel", (STORE_DX, STORE_DX.replace(", mask=mask", ""))),
                       "wrong-values", ["columns ≥", "were written", "past the end"]),
    "unmasked load": ("softmax_fwd_kernel", _edited("softmax_fwd_kernel", (LOAD, LOAD.replace(', mask=mask, other=-float("inf")', ""))),
                      "non-finite", ["columns ≥", "were read", "reads past the end"]),
    "no max shift": ("softmax_fwd_kernel", _edited("softmax_fwd_kernel", ("    e = tl.exp(x - m)  # every exponent ≤ 0: no overflow",
                                                                         "    e = tl.exp(x - 0.0)")),
                     "non-finite", ["88.7", "Part C"]),
    "rows n_cols apart": ("softmax_fwd_kernel", _edited("softmax_fwd_kernel", (LOAD, LOAD.replace("x_row_stride", "n_cols")),
                                                        (STORE, STORE.replace("y_row_stride", "n_cols"))),
                          "wrong-values", ["row 0", "x_row_stride"]),
    "float32 inside": ("softmax_fwd_kernel", _edited("softmax_fwd_kernel", (LOAD, LOAD.replace("))", ")).to(tl.float32)"))),
                       "wrong-values", ["float32 precision"]),
    "float16 hub": ("softmax_bwd_kernel", _edited("softmax_bwd_kernel", (WIDEN_DY, ""), (WIDEN_Y, "")),
                    "half-accumulation", ["float16", "hub s", "right on these values in float32"]),
    "float16 ℓ": ("softmax_fwd_kernel", _edited("softmax_fwd_kernel", (WIDEN_X, ""),
                                                (EXP, "    e = tl.exp(x - m).to(X_ptr.dtype.element_ty)")),
                  "half-accumulation", ["float16", "row sum ℓ"]),
    "missing s": ("softmax_bwd_kernel", _edited("softmax_bwd_kernel", (DX, "    dx = y * dy")), "wrong-values",
                  ["row's scalar"]),
    "kernel error": ("softmax_bwd_kernel", _edited("softmax_bwd_kernel", (DX, "    dx = y * (dy - undefined_name)")),
                     "error", ["NameError"]),
    "wrong axis": ("triton_softmax", {"triton_softmax": '''
def triton_softmax(x):
    if x.ndim == 1:
        return TritonSoftmax.apply(x[None]).view(x.shape)
    return TritonSoftmax.apply(x.movedim(0, -1).reshape(-1, x.shape[0]).contiguous()).view(
        x.movedim(0, -1).shape).movedim(-1, 0)'''}, "broadcast-axis", ["axis 0"]),
    "saves x only": ("TritonSoftmax", {"TritonSoftmax": edited_solution(SLUG, "TritonSoftmax", """
-        ctx.save_for_backward(y)  # y only: the backward is written in terms of the output
+        ctx.save_for_backward(x)
-        (y,) = ctx.saved_tensors
+        (x,) = ctx.saved_tensors
+        y = torch.empty_like(x)  # y recomputed from x: a second forward launch
+        softmax_fwd_kernel[(x.shape[0],)](x, y, x.stride(0), y.stride(0), x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
""")}, "wrong-values", ["(x)", "backward kernel reads"]),
}


# What course.sanitizer names first on a CPU, where MORE_BUGS gives what the checks' own ladder says on a GPU
# (the interpreter does not run there, and the sanitizer records nothing): (class, words).
SANITIZED = {
    "unmasked store": ("out-of-bounds", ["stores to", "past the last element of DX_ptr", "of softmax_bwd_kernel)"]),
    "unmasked load": ("out-of-bounds", ["loads", "past the last element of X_ptr", "of softmax_fwd_kernel)"]),
    "rows n_cols apart": ("out-of-bounds", ["softmax_fwd_kernel loads X_ptr + ", "in program (1, 0, 0)", "between the elements of X_ptr"]),
}


def assert_named(bug: str, cls: str, words: list[str]) -> None:
    """Both checks give MORE_BUGS[bug] the class ``cls`` and a message holding each of ``words``."""
    name, cells, _, _ = MORE_BUGS[bug]
    ns = variant(bug, cells)
    for check in (getattr(visible, name), getattr(hidden, name)):
        failure = failure_of(check, ns[name])
        assert failure.cls == cls, f"{bug}: {failure}"
        for word in words:
            assert word in str(failure), f"{bug}: {word!r} not in {failure}"


@pytest.mark.parametrize("bug", list(MORE_BUGS))
def test_more_bugs_are_named(bug, capsys):
    assert_named(bug, *SANITIZED.get(bug, MORE_BUGS[bug][2:]))
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("bug", list(SANITIZED))
def test_without_the_sanitizer_the_ladder_still_names_the_mask_bugs(bug, unsanitized, capsys):
    assert_named(bug, *MORE_BUGS[bug][2:])
    assert capsys.readouterr().err == ""


# Diagnoses name the bug and why; the literal fix lives in the notebook's last hint.
LITERAL_FIXES = ("other=-float", "other=0", "mask=cols < n_cols", "save_for_backward(y)", "dy.contiguous()",
                 ".contiguous()", ".view(x.shape)", "reshape(-1,", "tl.sum(y * dy", "y * (dy - s)", ".to(tl.float32)",
                 "primitive_bitwidth")


@pytest.mark.parametrize("bug", list(MORE_BUGS))
def test_no_diagnosis_prints_the_fixed_code(bug):
    name, cells, _, _ = MORE_BUGS[bug]
    ns = variant(bug, cells)
    for check in (getattr(visible, name), getattr(hidden, name)):
        message = str(failure_of(check, ns[name]))
        assert not [fix for fix in LITERAL_FIXES if fix in message], message


def test_every_hint_table_covers_its_exercises():
    from course.registry import BY_NAME, exercises_of

    assert set(exercises_of("03_triton_fused_softmax")) == set(EXERCISES)
    assert all("*" in BY_NAME[name].hints for name in EXERCISES)


def test_a_forward_that_leaves_the_widening_to_tl_exp_passes_in_float16():
    """Triton computes tl.exp in float32 for a float16 argument, so without the explicit widening e, ℓ and y are
    float32 anyway: the float16 check measures what the kernel computes, and passes it."""
    ns = variant("no explicit widening", _edited("softmax_fwd_kernel", (WIDEN_X, "")))
    for check in (visible.softmax_fwd_kernel, hidden.softmax_fwd_kernel):
        check(ns["softmax_fwd_kernel"])


def test_the_float16_bound_holds_the_solution_and_rejects_a_float16_hub_by_orders_of_magnitude():
    """The margin, measured: the solution's float16 dx is within 0.5 spacing plus float32 rounding; a float16 hub
    is hundreds of spacings off on the visible case."""
    from course.kernel_spec import float16_spacings
    from course.selfcheck.triton_softmax import BWD, VISIBLE_HALF_SHAPE, half_backward_case

    case = half_backward_case(torch.Generator().manual_seed(0), *VISIBLE_HALF_SHAPE)
    right = variant("solution", {})["softmax_bwd_kernel"]
    wrong = variant("float16 hub", _edited("softmax_bwd_kernel", (WIDEN_DY, ""), (WIDEN_Y, "")))["softmax_bwd_kernel"]
    got_right = BWD.launch(right, case).got["dx"]
    got_wrong = BWD.launch(wrong, case).got["dx"]
    assert float16_spacings(got_right, case.expected).max() <= 0.75
    assert float16_spacings(got_wrong, case.expected).max() >= 50 * BWD.half.spacings
