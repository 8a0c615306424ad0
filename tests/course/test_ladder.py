"""One debugging order: the ladder ``course.diagnose.LADDER`` is the order notebook 00 (§6) teaches and notebook 01
(Part D) practises, and the classifier reads a wrong result on it — shown by results that two rungs explain."""

import re
from pathlib import Path

import pytest
import torch

from course import diagnose as engine
from course.diagnose import LADDER, WHY, Case, diagnose, run_cases

ROOT = Path(__file__).resolve().parents[2]
F64 = torch.float64
g = torch.Generator().manual_seed(5)
R = torch.randn(4, 4, generator=g, dtype=F64)  # a square right answer, neither symmetric nor antisymmetric
ANTI = R - R.T  # antisymmetric: its transpose is its negative


def taught_order(path: str, start: str, end: str, pattern: str) -> list[str]:
    text = (ROOT / path).read_text()
    section = text[text.index(start):text.index(end, text.index(start))]
    return re.findall(pattern, section, re.M)


def test_notebook_00_teaches_the_ladders_order_and_says_why_for_each_rung():
    taught = taught_order("notebooks/00_vjp_contract.py", "## 6. When a backward is wrong", "Each exercise adds",
                          r"^# \d\. \*\*`([a-z-]+)`\*\*")
    assert taught == list(LADDER)
    assert set(WHY) == set(LADDER) and all(len(WHY[r].split()) >= 8 for r in LADDER)


def test_notebook_01_part_d_lists_the_classes_in_the_ladders_order():
    rows = taught_order("notebooks/01_matmul_from_shapes.py", "## Part D — name_the_bug", "# %% solution",
                        r'^# \| `"([a-z-]+)"` \|')
    # broadcast-axis is that exercise's own named bug, tried right after the shape; name_the_bug has no shape row.
    assert rows[0] == "broadcast-axis" and rows[1:] == [r for r in LADDER if r != "shape"]


@pytest.mark.parametrize("got, right, cls", [
    (-R, R, "sign"),  # −r is a constant factor too (−1): the narrower name wins
    (-ANTI, ANTI, "sign"),  # −r = rᵀ: a sign flip and a transpose; sign comes first
    (3 * R.T, R, "wrong-values"),  # a transpose *and* a factor is neither alone
    (-R.reshape(-1), R, "shape"),  # the values of a sign flip, in the wrong shape: the shape comes first
])
def test_a_result_two_rungs_explain_gets_the_earlier_rungs_name(got, right, cls):
    assert diagnose("dW", got, right).cls == cls


def test_a_factor_of_the_batch_is_scale_not_batch_reduction():
    """Right at batch 1 and M times too large at batch 7: the scale rung comes before the batch rung."""
    x1, x7 = torch.randn(1, 3, generator=g, dtype=F64), torch.randn(7, 3, generator=g, dtype=F64)
    cases = [Case("batch 1", (x1,), batch=1), Case("batch 7", (x7,), batch=7)]

    def reference(x):
        return x.sum(dim=0)

    with pytest.raises(engine.GradingFailure) as info:
        run_cases("db", lambda x: x.shape[0] * x.sum(dim=0), cases, reference, outputs=("db",))
    assert info.value.cls == "scale" and "batch size" in info.value.sentence
    with pytest.raises(engine.GradingFailure) as info:  # right at batch 1, wrong above, no factor: the batch rung
        run_cases("db", lambda x: x[-1], cases, reference, outputs=("db",))
    assert info.value.cls == "batch-reduction"


def test_the_classifier_climbs_whatever_ladder_it_is_given(monkeypatch):
    """By behaviour, not by reading the code: with transpose moved above sign, −r for an antisymmetric r reads as a
    transpose. (The scale rung names factors other than ±1, so it never competes with sign.)"""
    assert diagnose("dW", -ANTI, ANTI).cls == "sign"
    monkeypatch.setattr(engine, "LADDER", ("shape", "transpose", "sign", "scale", "batch-reduction", "wrong-values"))
    assert diagnose("dW", -ANTI, ANTI).cls == "transpose"
