"""course.kernel_spec without a kernel: the guarded buffers and the runner's order of verdicts, on launches faked as
their results (the lessons' tests run the real kernels)."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from course.diagnose import GradingFailure
from course.kernel_spec import SENTINEL, FunctionSpec, Guarded, KernelSpec, Launch, Step

F64 = torch.float64


def test_a_guarded_view_tells_a_store_outside_it_from_one_inside():
    for transposed in (False, True):
        g = Guarded(torch.ones(3, 4, dtype=F64), (2, 5), math.nan, F64, transposed)
        assert torch.equal(g.got(), torch.ones(3, 4, dtype=F64)) and not g.spilled()
        g.view[2, 3] = 7.0
        assert not g.spilled()
        g.buf.reshape(-1)[-1] = 7.0  # past the view, in the padding
        assert g.spilled()


def _spec(got: torch.Tensor, **fields) -> KernelSpec:
    return KernelSpec(name="k", launch=lambda kernel, case, fill=math.nan: Launch({"dx": got}, [], [], "two rows"),
                      reference=lambda case: {"dx": torch.ones(2, 3, dtype=F64)}, read_only="",
                      past_end=lambda spec, case, run: ("", ""), **fields)


def test_an_unwritten_row_is_refused_before_the_values_only_when_the_spec_says_why():
    got = torch.ones(2, 3, dtype=F64)
    got[1] = SENTINEL
    spec, case = _spec(got, unwritten="each program writes its own row."), SimpleNamespace(dtype=F64)
    with pytest.raises(GradingFailure) as raised:
        spec.check_case(None, case)
    assert raised.value.cls == "wrong-values" and "never wrote dx for row(s) [1]" in raised.value.sentence
    with pytest.raises(GradingFailure) as raised:
        replace(spec, unwritten="").check_case(None, case)
    assert "never wrote" not in raised.value.sentence
    _spec(torch.ones(2, 3, dtype=F64), unwritten="each program writes its own row.").check_case(None, case)


class Square(torch.autograd.Function):
    """y = x², its backward by hand from the saved x."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return 2 * x * dy


def _function_spec(**fields) -> FunctionSpec:
    return FunctionSpec(
        name="Square", leaves=lambda case: (case.x.clone().requires_grad_(True),),
        reference=lambda case: ({"y": case.x * case.x}, {"dx": 2 * case.x * case.dy}), no_history="", hand_written="by hand.",
        upstream=lambda case: [("contiguous", case.dy)], layout_why="", **fields)


def test_a_function_spec_runs_its_steps_in_order_and_shows_raw_what_backward_returned():
    case = SimpleNamespace(x=torch.randn(2, 3, dtype=F64), dy=torch.randn(2, 3, dtype=F64), label="two rows",
                           dtype=F64)
    seen: list = []
    spec = _function_spec(raw=lambda case, returned, label: seen.append(("raw", returned.shape, label)))
    spec.check(Square, [Step(lambda guarded: seen.append(("step", guarded.__name__))), case])
    assert seen == [("step", "Square"), ("raw", (2, 3), "two rows, ȳ a contiguous (strides (3, 1))")]
    with pytest.raises(GradingFailure, match="not a kernel"):
        spec.check(Square, [case, Step(lambda guarded: (_ for _ in ()).throw(GradingFailure("error", "not a kernel")))])


def test_a_backward_that_hides_autograds_refusal_behind_another_error_is_still_autograd_in_backward():
    class Hiding(Square):
        @staticmethod
        def backward(ctx, dy):
            try:
                torch.autograd.grad(dy.sum(), dy)
            except Exception:
                raise ValueError("no gradient today") from None

    case = SimpleNamespace(x=torch.randn(2, 3, dtype=F64), dy=torch.randn(2, 3, dtype=F64), label="two rows",
                           dtype=F64)
    with pytest.raises(GradingFailure) as raised:
        _function_spec().check(Hiding, [case])
    assert raised.value.cls == "autograd-in-backward"
