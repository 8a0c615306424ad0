"""course.kernel_spec without a kernel: the guarded buffers and the runner's order of verdicts, on launches faked as
their results (the lessons' tests run the real kernels)."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from course.diagnose import GradingFailure
from course.kernel_spec import SENTINEL, Guarded, KernelSpec, Launch

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
