"""course.spec, the PyTorch-function spec type, and autograder.check.hidden, the one hidden check built on it."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
import torch

from autograder.check.hidden import hidden
from course.diagnose import Case, GradingFailure, Passed, diagnose
from course.spec import NO_LIBRARY_BACKWARD, BatchAxis, Exercise, Refuses, Runner, Spread, among, merged

X = torch.randn(7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def calls(*ops: str) -> list:
    return [((), SimpleNamespace(ops=Counter(ops)))]


def test_a_rule_refuses_the_ops_it_names_and_says_which_ran():
    rule = Refuses(among("aten.logsumexp", "aten._softmax"), "delegated-to-library", "{name} ran {ops}; first {op}")
    rule("f", calls("aten.add", "aten.mul"), [])  # nothing refused
    with pytest.raises(GradingFailure) as info:
        rule("f", calls("aten._softmax", "aten.add", "aten.logsumexp"), [])
    assert info.value.cls == "delegated-to-library"
    assert info.value.sentence == "f ran aten._softmax and aten.logsumexp; first aten._softmax"


@pytest.mark.parametrize("op", ["aten._softmax_backward_data", "aten.native_layer_norm_backward", "aten._make_dual"])
def test_the_library_backward_rule_is_the_graders(op):
    with pytest.raises(GradingFailure) as info:
        NO_LIBRARY_BACKWARD("softmax_backward", calls("aten.exp", op), [])
    assert info.value.cls == "autograd-in-backward" and op in info.value.sentence
    NO_LIBRARY_BACKWARD("softmax_backward", calls("aten.exp", "aten.sum"), [])


def test_the_batch_refinement_reads_a_failure_in_the_light_of_the_cases_before():
    generic = diagnose("dw", X + 1.0, X)
    case = Case("batch 7", (X,), batch=7)
    assert BatchAxis()(generic, "dw", case, (), (), Passed(batch1=True)).cls == "batch-reduction"
    assert BatchAxis()(generic, "dw", case, (), (), Passed()) is generic  # batch 1 never passed
    assert BatchAxis(until_contiguous=True)(generic, "dw", case, (), (), Passed(batch1=True, contiguous=True)) is generic
    transposed = Case("batch 7, transposed", (X.T.contiguous().T,), batch=7)
    layout = BatchAxis(layout=True)(generic, "dw", transposed, (), (), Passed(batch1=True, contiguous=True))
    assert layout.cls == "wrong-values" and "laid out" in layout.sentence


def test_a_table_row_is_a_shape_then_its_options():
    draw = Spread(lambda gen, *shape, note="": Case(f"{shape}{note}", ()))
    assert [draw(None, row).label for row in [(2, 3), (4, {"note": "!"})]] == ["(2, 3)", "(4,)!"]


def test_merged_alternatives_keep_every_source_in_order():
    a = lambda case: {"dx": [1], "dw": [2]}  # noqa: E731
    b = lambda case: {"dx": [3]}  # noqa: E731
    assert merged(a, b)(None) == {"dx": [1, 3], "dw": [2]}


def test_properties_see_every_call_and_case_once_the_values_pass():
    seen = []
    spec = Exercise(name="double", reference=lambda x: 2 * x, outputs=("y",), draw=lambda gen, n: Case(f"n {n}", (X[:n],)),
                    properties=(lambda name, recorded, cases: seen.append((name, len(recorded), len(cases))),))
    cases = spec.cases(None, [1, 7])
    spec.check(lambda x: 2 * x, cases)
    assert seen == [("double", 2, 2)]
    with pytest.raises(GradingFailure):
        spec.check(lambda x: 3 * x, cases)
    assert len(seen) == 1  # wrong values: no property is read


def test_the_hidden_check_is_named_after_its_spec_and_replays_with_the_seed(monkeypatch):
    drawn = []
    spec = Runner("some_exercise", lambda fn, cases: drawn.append(cases))
    check = hidden(spec, lambda gen: torch.randn(3, generator=gen))
    assert check.__name__ == "some_exercise"
    monkeypatch.setenv("AUTOGRADER_SEED", "5")
    check(None)
    check(None)
    monkeypatch.setenv("AUTOGRADER_SEED", "6")
    check(None)
    assert torch.equal(drawn[0], drawn[1]) and not torch.equal(drawn[0], drawn[2])
