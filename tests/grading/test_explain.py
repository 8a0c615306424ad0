"""A zero's reason is written under its test cell in the autograded notebook, where nbgrader's feedback shows it."""

import nbformat

from autograder.batch import explain_in_notebook
from autograder.report import Row


def notebook(path, outputs_by_cell):
    nb = nbformat.v4.new_notebook()
    for grade_id, outputs in outputs_by_cell.items():
        cell = nbformat.v4.new_code_cell("autograder.check.f(f)")
        cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "points": 1}
        cell.outputs = outputs
        nb.cells.append(cell)
    nbformat.write(nb, path)


def stderr_of(path, grade_id):
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.metadata["nbgrader"]["grade_id"] == grade_id)
    return "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stderr")


def test_a_tampering_zero_under_a_passing_output_is_explained(tmp_path):
    path = tmp_path / "a.ipynb"
    passed = [nbformat.v4.new_output("stream", name="stdout", text="✓ f passes the visible checks\n")]
    notebook(path, {"test_f": passed, "test_g": passed})
    reason = "tampering: passed in the kernel, but the trusted re-check found sign: the gradient has the wrong sign"
    explain_in_notebook(path, [Row("s", "a", "test_f", 0, 1, "tampering", reason), Row("s", "a", "test_g", 1, 1)])
    assert stderr_of(path, "test_f") == f"Grader: this part scored 0. {reason}\n"
    assert stderr_of(path, "test_g") == "", "a part with full marks gets no line"


def test_a_reason_the_output_already_states_is_not_repeated(tmp_path):
    path = tmp_path / "a.ipynb"
    reason = "kernel died: the kernel process ended while this cell ran"
    notebook(path, {"test_f": [nbformat.v4.new_output("error", ename="GradingStopped", evalue=reason, traceback=[])]})
    before = path.read_text()
    explain_in_notebook(path, [Row("s", "a", "test_f", 0, 1, "", reason)])
    assert path.read_text() == before


def test_a_wrong_answer_with_its_diagnosis_needs_no_line(tmp_path):
    path = tmp_path / "a.ipynb"
    notebook(path, {"test_f": [nbformat.v4.new_output("error", ename="GradingFailure", evalue="diagnosis: sign", traceback=[])]})
    before = path.read_text()
    explain_in_notebook(path, [Row("s", "a", "test_f", 0, 1, "sign", "")])
    assert path.read_text() == before
