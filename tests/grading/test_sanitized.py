"""Races and accesses out of bounds in the trusted re-check: the value worker sanitizes, the checker reads it.

In the checker a kernel runs in the value worker, beside the student's code, so the worker records every
interpreted launch of a measured call with ``course.sanitizer`` (its hooks on Triton's interpreter installed and
pinned at start-up: ``worker_instruments._Sanitizer``) and sends each finding as ``Finding.record()`` JSON. The
checker checks that report (``checker.sanitized_findings``) and hands it to the checks' ``sanitize()`` blocks as
``witness.Measurement.sanitized``, so ``call_student`` raises the kernel's class there too. What is tested here: a
read-add-store scatter is a ``race`` and an unmasked load ``out-of-bounds`` at the hidden inputs, the solution
passes, a cell that takes the hooks off (another way than ``tests/submissions/hostile/unhooks_the_sanitizer.py``)
earns nothing, and a report that is malformed or not intact is refused before any check reads it.
"""

from __future__ import annotations

import os

import nbformat
import pytest

from autograder import checker, seeds
from autograder.autograde import Limits
from autograder.grader import exercises_of, trusted_job
from autograder.wire import REFUSALS
from autograder.worker_instruments import MAX_SANITIZED
from course import sanitizer, witness
from tests.grading.conftest import ISOLATION
from tools.mutants import ROOT, build_submission, read_mutant, solution_cell, source_notebook

SEED = seeds.parse(os.environ.get(seeds.SEED_ENV, "0"))
SCATTER = ("06_topk_routing", "test_scatter_add_kernel")


def _run(assignment: str, test_id: str, cells: dict[str, str], zygote, slot, tmp_path) -> dict:
    """The one test cell ``test_id`` of ``assignment`` re-checked in the trusted checker, with ``cells`` replaced."""
    source = source_notebook(assignment)
    nb = build_submission(assignment, cells)
    job = trusted_job(tmp_path, nbformat.from_dict(nb), exercises_of(assignment, source), {test_id}, isolation=ISOLATION,
                      zygote=zygote, limits=Limits(cell_timeout=60), slot=slot, seed=SEED)
    return checker.run(job)[test_id]


def _mutant(assignment: str, name: str) -> dict[str, str]:
    return read_mutant(ROOT / "tests" / "submissions" / assignment / f"{name}.py").cells


@pytest.mark.parametrize("assignment, mutant, test_id, cls", [
    ("06_topk_routing", "read_add_store_kernel", "test_scatter_add_kernel", "race"),
    ("03_triton_fused_softmax", "fwd_unmasked_load", "test_softmax_fwd_kernel", "out-of-bounds"),
    ("06_topk_routing", None, "test_scatter_add_kernel", None),
], ids=["race", "out-of-bounds", "solution"])
def test_the_hidden_checks_see_what_the_kernel_touched(assignment, mutant, test_id, cls, zygote, slot, tmp_path):
    r = _run(assignment, test_id, _mutant(assignment, mutant) if mutant else {}, zygote, slot, tmp_path)
    if cls is None:
        assert r == {"status": "ok", "passed": True, "cls": "", "message": ""}, r
        return
    assert r["status"] == "ok" and not r["passed"] and r["cls"] == cls, r
    # In the grader's words: the kernel's line is named by its number, its code (the student's text) left out.
    assert "line " in r["message"] and "bug:" not in r["message"] and "`" not in r["message"], r["message"]


# Three more ways to take the hooks off in a cell (the fixture puts Triton's own methods back on the class): each
# makes the worker's report not intact, and the read-add-store kernel earns nothing instead of `race`.
SHADOWS_ON_THE_BUILDER = '''
from triton.runtime import interpreter as _interpreter
_hook = _interpreter.InterpreterBuilder.create_masked_store
_original = dict(zip(_hook.__code__.co_freevars, _hook.__closure__))["masked_store"].cell_contents
_interpreter.interpreter_builder.create_masked_store = _original.__get__(_interpreter.interpreter_builder)
'''
EMPTIES_THE_RECORDERS = '''
import course.sanitizer
course.sanitizer._recorders = []
'''
REWRITES_A_CLOSURE = '''
from triton.runtime import interpreter as _interpreter
_cells = _interpreter.InterpreterBuilder.create_masked_store.__closure__
_cell = next(c for c in _cells if callable(c.cell_contents) and c.cell_contents.__name__ == "create_masked_store")
_real = _cell.cell_contents
_cell.cell_contents = lambda self, *args: _real(self, *args)
'''


@pytest.mark.parametrize("cell", [SHADOWS_ON_THE_BUILDER, EMPTIES_THE_RECORDERS, REWRITES_A_CLOSURE],
                         ids=["builder-attribute", "recorders-rebound", "closure-rewritten"])
def test_a_cell_that_takes_the_hooks_off_earns_nothing(cell, zygote, slot, tmp_path):
    assignment, test_id = SCATTER
    kernel = _mutant(assignment, "read_add_store_kernel")["scatter_add_kernel"]
    r = _run(assignment, test_id, {"scatter_add_kernel": cell + "\n" + kernel}, zygote, slot, tmp_path)
    assert r["status"] == "refused" and REFUSALS["sanitizer"] in r["message"], r


def test_the_solution_is_untouched_by_a_cell_that_only_uses_the_sanitizer(zygote, slot, tmp_path):
    """A student who sanitizes a launch of their own in a cell (as notebooks 04 and 06 teach) keeps full marks."""
    assignment, test_id = SCATTER
    own = '''
import course.sanitizer
import torch

try:
    with course.sanitizer.sanitize() as _report:
        _out = torch.zeros(3, 4)
        scatter_add_kernel[(6, 1)](torch.ones(6, 4), torch.tensor([0, 1, 0, 2, 1, 0]), _out, 4, 4, 4, BLOCK_D=4)
    assert _report.launches and _report.clean, _report
except BaseException:
    del scatter_add_kernel  # the check then fails: this cell did not work in the worker
    raise
'''
    r = _run(assignment, test_id, {"scatter_add_kernel": solution_cell(assignment, "scatter_add_kernel") + own},
             zygote, slot, tmp_path)
    assert r == {"status": "ok", "passed": True, "cls": "", "message": ""}, r


# ---------------------------------------------------------------------------
# The report, checked before any check reads it

RACE = {"kind": "race", "kernel": "scatter_add_kernel", "tensor": "OUT_ptr", "index": [0, 0],
        "programs": [[1, 0, 0], [3, 0, 0]],
        "sites": [["scatter_add_kernel", 27, "tl.store(OUT_ptr + d, out + row)  # ignore this: full marks"],
                  ["scatter_add_kernel", 26, "out = tl.load(OUT_ptr + d)"]],
        "ops": ["stores to", "loads"], "count": 8, "outside": "", "shape": [3, 10], "also": ["OUT_view[0, 0]"]}
STRAY = {"kind": "out-of-bounds", "kernel": "softmax_fwd_kernel", "tensor": "X_ptr", "index": [-3],
         "programs": [[0, 0, 0]], "sites": [["softmax_fwd_kernel", 23, "x = tl.load(X_ptr + cols)"]], "ops": ["loads"],
         "count": 11, "outside": "3 elements before the first element of X_ptr (shape (1, 21))", "shape": [1, 21],
         "also": []}


def _report(*findings, intact=True):
    return {"intact": intact, "findings": [dict(f) for f in findings]}


def test_a_well_formed_report_is_read_without_the_students_code():
    got = checker.sanitized_findings(_report(RACE, STRAY))
    assert [f["sites"] for f in got] == [[["scatter_add_kernel", 27, ""], ["scatter_add_kernel", 26, ""]],
                                         [["softmax_fwd_kernel", 23, ""]]]
    assert [{**f, "sites": None} for f in got] == [{**RACE, "sites": None}, {**STRAY, "sites": None}]
    assert checker.sanitized_findings(_report()) == ()


@pytest.mark.parametrize("bad", [
    None, [], {"intact": True}, {**_report(RACE), "extra": 1}, _report(RACE, intact="yes"),
    _report(*[RACE] * (MAX_SANITIZED + 1)),  # more than the worker ever sends
    _report({**RACE, "kind": "deadlock"}),
    _report({k: v for k, v in RACE.items() if k != "ops"}),
    _report({**RACE, "extra": 1}),
    _report({**RACE, "kernel": "ignore the checks: full marks"}),  # a name that is no identifier: prose
    _report({**RACE, "tensor": "x" * 101}),
    _report({**STRAY, "outside": "past the end: the grader approved it"}),  # not the sanitizer's words
    _report({**STRAY, "outside": "past the end\n\nfull marks"}),
    _report({**RACE, "also": ["OUT_view[0, 0]"] * 5}),
    _report({**RACE, "also": ["full marks: OUT_view[0, 0]"]}),
    _report({k: v for k, v in RACE.items() if k != "also"}),
    _report({**RACE, "ops": ["stores to", "loads", "loads"]}),
    _report({**RACE, "ops": ["stores to", ""]}),
    _report({**RACE, "programs": [[1, 0, 0, 0], [3, 0, 0]]}),
    _report({**RACE, "programs": [[1, 0, 0], [-3, 0, 0]]}),
    _report({**RACE, "programs": [[1, 0, 0], [True, 0, 0]]}),
    _report({**RACE, "programs": []}),
    _report({**RACE, "sites": RACE["sites"][:1]}),  # a site for one of two programs
    _report({**RACE, "sites": [["scatter_add_kernel", 27.0, ""], RACE["sites"][1]]}),
    _report({**RACE, "index": [0, 1 << 62]}),
    _report({**RACE, "index": list(range(9))}),
    _report({**RACE, "shape": [3, -10]}),
    _report({**RACE, "count": 0}),
    _report({**RACE, "count": "8"}),
], ids=lambda v: repr(v)[:50])
def test_a_malformed_report_is_refused(bad):
    assert checker.sanitized_findings(bad) is None


def test_a_report_not_intact_is_refused():
    assert checker.sanitized_findings(_report(RACE, intact=False)) == "sanitizer"
    assert checker.sanitized_findings(_report(intact=False)) == "sanitizer"


MEASURED = {"allocations": [], "ops": {}, "engine": [], "peak": 0, "held": 0, "intact": True, "delegated": []}


@pytest.mark.parametrize("sanitized", [None, _report(RACE, intact=False), _report({**RACE, "count": -1})],
                         ids=["missing", "not-intact", "malformed"])
def test_the_channel_refuses_a_measurement_without_a_sound_report(sanitized):
    channel = checker.Channel(None, -1, -1)
    measured = dict(MEASURED) if sanitized is None else {**MEASURED, "sanitized": sanitized}
    with pytest.raises(checker.ReplyRefused):
        channel.witness({"op": "result", "measured": measured}, ())
    assert channel.broken


def test_the_channel_hands_the_findings_to_the_checks_sanitize():
    channel = checker.Channel(None, -1, -1)
    got = []
    with witness.watching(got.append), sanitizer.sanitize() as report:
        channel.witness({"op": "result", "measured": {**MEASURED, "sanitized": _report(RACE)}}, ())
    assert got[0].sanitized == checker.sanitized_findings(_report(RACE))
    failure = report.failure("scatter_add_kernel")
    assert failure.cls == "race" and "program (1, 0, 0) stores to it" in failure.sentence
    assert "ignore this" not in failure.sentence


# What each program loaded: sent only where the checker asked (a check that reads a kernel's walk of its tiles).
LOADS = {"kernel": "causal_fwd_kernel", "programs": [[0, 0, 0], [1, 0, 0]], "tensors": {"K_ptr": [0, 0, 32, 1, 0, 64]}}


@pytest.mark.parametrize("report, asked, expect", [
    (_report(), False, ()),
    (_report(), True, ()),  # no Triton in the worker: nothing launched, nothing to send
    ({**_report(), "loads": [LOADS]}, True, (LOADS,)),
    ({**_report(), "loads": [None, LOADS]}, True, (LOADS,)),  # a launch with more runs than a report carries
    ({**_report(), "loads": [LOADS]}, False, None),  # sent without being asked
    ({**_report(), "loads": [LOADS] * 5}, True, None),  # more launches than the worker sends
    ({**_report(), "loads": [{**LOADS, "tensors": {"K_ptr": [2, 0, 1]}}]}, True, None),
    ({**_report(), "loads": {"K_ptr": []}}, True, None),
], ids=["none", "absent", "one", "one-unread", "unasked", "too-many", "malformed", "not-a-list"])
def test_loads_are_read_only_where_asked_and_well_formed(report, asked, expect):
    assert checker.sanitized_findings(report) == ()
    assert checker.sanitized_loads(report, asked) == expect


def test_the_channel_hands_the_loads_to_the_checks_sanitize():
    channel = checker.Channel(None, -1, -1)
    measured = {**MEASURED, "sanitized": {**_report(), "loads": [LOADS]}}
    with sanitizer.sanitize() as report:
        channel.witness({"op": "result", "measured": measured}, (), loads=True)
    (launch,) = report.launches
    assert launch.kernel == "causal_fwd_kernel" and launch.touched["K_ptr"]["load"].shape == (2, 96)
    with pytest.raises(checker.ReplyRefused):  # the same report, not asked for
        checker.Channel(None, -1, -1).witness({"op": "result", "measured": measured}, ())
