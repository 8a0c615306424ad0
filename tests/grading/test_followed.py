"""Notebook 05's ``untiled`` rule in the trusted re-check, at the hidden T.

Parts C and D are checked by which query rows and key rows each tensor they allocate came from
(``course.memory.TokenRecorder``). In the trusted checker the student's function runs in the value worker, so the
worker follows the rows there (``worker_instruments.Instruments.follow``: the call made once more, on copies of its
arguments, under the recorder), reports each allocation's shape and rows as JSON, and the checker checks that report
(``checker.followed_allocations``) before the visible check's own decision reads it. What is tested here: the
row-at-a-time and 16-row-strip shortcuts are ``untiled`` at the hidden T, the solution passes, and a report that is
malformed, not intact or incomplete — or code that works otherwise when its rows are followed, or patches the
recorder — earns nothing (a refused reply: ``tampering``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest

from autograder import checker, seeds
from autograder.autograde import Limits
from autograder.grader import exercises_of, trusted_job
from autograder.wire import REFUSALS
from course import witness
from course.selfcheck.attention import MEMORY_T, PROPERTY_MIN_T
from tests.grading.conftest import ISOLATION
from tools.mutants import build_submission, read_mutant, solution_cell, source_notebook

ASSIGNMENT = "05_attention_recompute"
TESTS = ("test_attention_forward_lse", "test_attention_backward_recompute")
SEED = seeds.parse(os.environ.get(seeds.SEED_ENV, "0"))
MUTANTS = Path(__file__).resolve().parents[1] / "submissions" / ASSIGNMENT


def mutant(name: str):
    """One sample mutant, read on its own (the others' edits are test_checker's business)."""
    return read_mutant(MUTANTS / f"{name}.py")

# Tiled while a dispatch mode watches it (the recorder), a (B, 16, T) strip of scores otherwise: the worker's
# followed call sees tiles the measured call never allocated.
TWO_FACED = '''
BLOCK_Q = 64
BLOCK_K = 64
_tiled = attention_forward_lse


def attention_forward_lse(q, k, v):
    if torch._C._len_torch_dispatch_stack():
        return _tiled(q, k, v)
    B, T, d = q.shape
    c = 1 / math.sqrt(d)
    o = torch.empty_like(q)
    lse = q.new_empty(B, T)
    for i in range(0, T, 16):
        S = c * (q[:, i:i + 16] @ k.mT)
        m = S.amax(dim=-1, keepdim=True)
        lse[:, i:i + 16] = (m + torch.log(torch.exp(S - m).sum(dim=-1, keepdim=True)))[..., 0]
        o[:, i:i + 16] = torch.exp(S - lse[:, i:i + 16, None]) @ v
    return o, lse
'''

# The recorder's op table patched from a cell: a matmul's result then came "from no rows" (the strip16 forward).
PATCHES_THE_RECORDER = '''
import course.memory
course.memory._SHAPE_ONLY.update({"bmm", "mm", "mul", "exp", "sub"})
'''


def _run(cells: dict[str, str], zygote, slot, tmp_path) -> dict:
    source = source_notebook(ASSIGNMENT)
    nb = build_submission(ASSIGNMENT, cells)
    job = trusted_job(tmp_path, nbformat.from_dict(nb), exercises_of(ASSIGNMENT, source), set(TESTS), isolation=ISOLATION,
                      zygote=zygote, limits=Limits(cell_timeout=60), slot=slot, seed=SEED)
    return checker.run(job)


@pytest.mark.parametrize("name", ["rows", "strip16"])
def test_shortcuts_are_untiled_at_the_hidden_T(name, zygote, slot, tmp_path):
    r = _run(mutant(name).cells, zygote, slot, tmp_path)["test_attention_forward_lse"]
    assert r["status"] == "ok" and not r["passed"] and r["cls"] == "untiled", r
    # The forward has no D: its `untiled` can only come from the rows the worker followed, named with its shape.
    found = re.search(r"at T = (\d+) it allocated a 2×(\d+)×(\d+) tensor \(aten\.\w+\) computed from (\d+) query rows? "
                      r"and (\d+) key rows", r["message"])
    assert found, r["message"]
    T, strip, keys, nq, nk = map(int, found.groups())
    assert PROPERTY_MIN_T <= T < MEMORY_T  # the hidden T (in [200, 256)), not the visible one (256)
    assert keys == nk == T and nq == strip == {"rows": 1, "strip16": 16}[name]


def test_the_solution_passes(zygote, slot, tmp_path):
    r = _run({}, zygote, slot, tmp_path)
    for t in TESTS:
        assert r[t] == {"status": "ok", "passed": True, "cls": "", "message": ""}, (t, r[t])


@pytest.mark.parametrize("cell", [TWO_FACED, PATCHES_THE_RECORDER], ids=["two-faced", "patches-the-recorder"])
def test_working_otherwise_when_followed_earns_nothing(cell, zygote, slot, tmp_path):
    if cell is TWO_FACED:
        cells = {"attention_forward_lse": solution_cell(ASSIGNMENT, "attention_forward_lse") + cell}
    else:
        cells = {"attention_forward_lse": cell + mutant("strip16").cells["attention_forward_lse"]}
    r = _run(cells, zygote, slot, tmp_path)["test_attention_forward_lse"]
    assert r["status"] == "refused" and REFUSALS["following"] in r["message"], r


# ---------------------------------------------------------------------------
# The report, checked before any check reads it

GOOD = ["aten.bmm", [2, 16, 230], 7360, 58880, "float64", False, 16, 230, False]


def _report(*rows, intact=True, complete=True):
    return {"intact": intact, "complete": complete, "allocations": [list(r) for r in rows]}


def test_a_well_formed_report_is_read_as_measured():
    got = checker.followed_allocations(_report(GOOD))
    assert got == (witness.Followed("aten.bmm", (2, 16, 230), 7360, 58880, "float64", False, 16, 230, False),)


@pytest.mark.parametrize("bad", [
    None, [], "allocations", {"intact": True, "allocations": []},
    {**_report(GOOD), "extra": 1},
    _report(GOOD[:8]),  # an entry without its `returned`
    _report([*GOOD[:6], -1, 230, False]),  # negative rows
    _report([*GOOD[:6], 16.0, 230, False]),  # rows that are not a count
    _report([*GOOD[:6], True, 230, False]),  # a bool for a count
    _report([*GOOD[:4], "Tensor", *GOOD[5:]]),  # not a dtype
    _report([*GOOD[:4], "__class__", *GOOD[5:]]),
    _report([GOOD[0], [2, -16, 230], *GOOD[2:]]),
    _report([GOOD[0], "2×16×230", *GOOD[2:]]),
    _report([*GOOD[:8], 0]),  # returned is not a bool
    _report(GOOD, intact="yes"),
    {"intact": True, "complete": True, "allocations": [GOOD] * 1025},  # more than the worker ever sends
], ids=lambda v: repr(v)[:40])
def test_a_malformed_report_is_refused(bad):
    assert checker.followed_allocations(bad) is None


@pytest.mark.parametrize("flags", [{"intact": False}, {"complete": False}])
def test_a_report_not_intact_or_incomplete_is_refused(flags):
    assert checker.followed_allocations(_report(GOOD, **flags)) == "following"


MEASURED = {"allocations": [58880], "ops": {"aten.bmm": 1}, "engine": [], "peak": 0, "held": 0, "intact": True,
            "delegated": [], "sanitized": {"intact": True, "findings": []}}


@pytest.mark.parametrize("measured, followed", [
    (MEASURED, True),  # asked to follow, and no report: a reply that drops it earns nothing
    ({**MEASURED, "followed": _report(GOOD)}, False),  # a report nobody asked for
    ({**MEASURED, "followed": _report(GOOD, intact=False)}, True),
    ({**MEASURED, "followed": {"allocations": "all tiled"}}, True),
])
def test_the_channel_refuses_what_it_cannot_use(measured, followed):
    channel = checker.Channel(None, -1, -1)
    with pytest.raises(checker.ReplyRefused):
        channel.witness({"op": "result", "measured": measured}, (), followed=followed)
    assert channel.broken


def test_the_channel_hands_the_rows_to_the_checks():
    channel = checker.Channel(None, -1, -1)
    got = []
    with witness.watching(got.append):
        channel.witness({"op": "result", "measured": {**MEASURED, "followed": _report(GOOD)}}, (), followed=True)
    assert got[0].followed == checker.followed_allocations(_report(GOOD))
