"""Test cells as JupyterLab shows them to a student: read whole, and not in the way of Run All.

A test cell is locked, so a student cannot scroll a long line sideways in it: a line wider
than the editor is cut off at the right edge. And Run All sends the cells to the kernel
with stop-on-error unless a cell is tagged ``raises-exception``; an unsolved check would
otherwise stop the run and leave every later demonstration unrun for a new student.
"""

from __future__ import annotations

import json

import pytest

from autograder.nbgrader_cli import ROOT
from tools.release import RUN_ALL_GOES_ON, is_test_cell

# PEP 8's width: it fits the notebook editor of JupyterLab at its default font size beside the
# file browser on a 1366-pixel-wide laptop screen; the docstrings are wrapped at 76.
MAX_LINE = 79
NOTEBOOKS = sorted(ROOT.glob("source/*/*.ipynb")) + sorted(ROOT.glob("release/*/*.ipynb"))


def cells(path):
    return json.loads(path.read_text())["cells"]


def test_there_are_notebooks_to_check():
    assert len(NOTEBOOKS) >= 14, NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_line_of_a_test_cell_is_cut_off(path):
    too_long = []
    for cell in map(_node, cells(path)):
        if is_test_cell(cell):
            too_long += [(cell.metadata["nbgrader"]["grade_id"], len(line), line)
                         for line in cell.source.splitlines() if len(line) > MAX_LINE]
    assert not too_long, (
        f"{path.relative_to(ROOT)}: lines longer than {MAX_LINE} characters in test cells "
        f"(wrap them in notebooks/*.py): {too_long[:3]}"
    )


@pytest.mark.parametrize("path", sorted(ROOT.glob("release/*/*.ipynb")), ids=lambda p: p.parent.name)
def test_run_all_goes_on_past_every_check_of_a_release(path):
    graded = [_node(c) for c in cells(path) if is_test_cell(_node(c))]
    assert graded, f"{path} has test cells"
    untagged = [c.metadata["nbgrader"]["grade_id"] for c in graded if RUN_ALL_GOES_ON not in c.metadata.get("tags", [])]
    assert not untagged, f"{path.relative_to(ROOT)}: test cells without the {RUN_ALL_GOES_ON!r} tag: {untagged}"
    others = [c for c in map(_node, cells(path)) if not is_test_cell(c) and RUN_ALL_GOES_ON in c.metadata.get("tags", [])]
    assert not others, "only test cells may fail without stopping Run All"


@pytest.mark.parametrize("path", sorted(ROOT.glob("source/*/*.ipynb")), ids=lambda p: p.parent.name)
def test_source_notebooks_keep_errors_fatal_for_nbval(path):
    """nbval honours the tag too: on source/ it would let a failing check pass."""
    tagged = [c for c in map(_node, cells(path)) if RUN_ALL_GOES_ON in c.metadata.get("tags", [])]
    assert not tagged, f"{path.relative_to(ROOT)} has cells tagged {RUN_ALL_GOES_ON!r}"


def _node(cell: dict):
    import nbformat

    node = nbformat.from_dict(cell)
    if isinstance(node.source, list):
        node.source = "".join(node.source)
    return node
