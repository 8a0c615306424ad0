"""grades.csv, report.md and diagnoses.png from a handful of rows."""

from __future__ import annotations

from autograder.report import Row, outcome, read_csv, summary_markdown, write_outputs

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
    assert (tmp_path / "grades.csv").read_text().splitlines()[0] == "student,assignment,grade_id,score,max_score,diagnosis,reason"
    assert "reduce_to_shape: not re-checkable" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "diagnoses.png").stat().st_size > 5000
