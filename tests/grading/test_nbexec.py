"""What the executor keeps of a kernel's outputs, and where a row's reason comes from.

``autograder.nbexec.SandboxExecute`` runs here on a plain local kernel (no sandbox: what
is tested is what the grader's side keeps of what any kernel sends). The reasons are read
back by ``autograder.autograde`` from the execution record, never from an output.
"""

from __future__ import annotations

import json

import nbformat
import pytest

from autograder import autograde, contract, nbexec
from autograder.nbexec import CELL_OUTPUT_MAX, ERROR_MAX, NOTEBOOK_OUTPUT_MAX, SandboxExecute

MiB = 1 << 20
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


def notebook(*cells) -> nbformat.NotebookNode:
    """Code cells; a (source, grade_id) pair is a test cell."""
    nb = nbformat.v4.new_notebook()
    for cell in cells:
        source, grade_id = cell if isinstance(cell, tuple) else (cell, "")
        c = nbformat.v4.new_code_cell(source)
        if grade_id:
            c.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "points": 1, "solution": False,
                                      "locked": True, "schema_version": 3}
        nb.cells.append(c)
    return nb


def execute(nb, tmp_path, timeout=20):
    record = tmp_path / autograde.EXECUTION_RECORD
    nb, _ = SandboxExecute(timeout=timeout, record_file=str(record)).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    return nb, json.loads(record.read_text())["reasons"]


def size(outputs) -> int:
    return len(json.dumps(outputs, ensure_ascii=False).encode())


def texts(cell) -> str:
    return "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in cell.outputs)


def test_only_text_and_images_are_kept(tmp_path):
    nb, _ = execute(notebook(
        "from IPython.display import HTML, SVG, Javascript, Latex, Markdown, display\n"
        "display(HTML('<script>alert(1)</script><img src=x onerror=alert(2)>'))\n"
        "display(Javascript('alert(3)'))\n"
        "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"alert(4)\"></svg>'))\n"
        "display(Markdown('<img src=y onerror=alert(5)>'))\n"
        "display(Latex(r'$\\href{javascript:alert(6)}{x}$'))\n"
        "display({'application/vnd.jupyter.widget-view+json': {'model_id': 'm'}}, raw=True)\n"
        "import ipywidgets\n"
        "display(ipywidgets.HTML('<script>alert(9)</script>'))\n"
        "display({'image/png': 'AAAA\" onerror=\"alert(7)', 'text/plain': 'broken png'}, raw=True)\n"
        f"display({{'image/png': '{PNG}', 'text/plain': 'png'}}, metadata={{'image/png': "
        "{'width': 40, 'height': '1\" onerror=\"alert(8)'}}, raw=True)\n"), tmp_path)
    outputs = nb.cells[0].outputs
    kept = {mime for o in outputs for mime in o.get("data", {})}
    assert kept == {"text/plain", "image/png"}, kept
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert [o.data["image/png"] for o in pngs] == [PNG], "the broken PNG is not kept as an image"
    assert pngs[0].metadata == {"image/png": {"width": 40}}
    assert nbexec.NOT_KEPT in texts(nb.cells[0]), "the widget, which had no text, says it was not kept"
    markup = [({k: v for k, v in o.get("data", {}).items() if k != "text/plain"}, o.get("metadata")) for o in outputs]
    assert "alert" not in json.dumps(markup), "no markup is kept, only text (which every page escapes)"
    assert "widgets" not in nb.metadata, "no widget state either"


def test_a_cell_and_a_notebook_keep_at_most_their_caps_and_say_so(tmp_path):
    big = 8 * MiB
    cells = [f"print('a' * {big})", f"display({{'text/plain': 'b' * {big}}}, raw=True)"]
    cells += [f"print('{c}' * {big})" for c in "cdefg"]
    cells += [("raise ValueError('diagnosis: sign — ' + 'h' * (1 << 20))", "test_after_the_cap")]
    nb, _ = execute(notebook(*cells), tmp_path)
    for cell in nb.cells:
        assert size(cell.outputs) <= CELL_OUTPUT_MAX + 4096, (cell.source[:30], size(cell.outputs))
    assert nbexec.truncated(f"this cell's output passed {CELL_OUTPUT_MAX >> 10} KiB") in texts(nb.cells[0])
    assert nbexec.truncated(f"the notebook's outputs passed {NOTEBOOK_OUTPUT_MAX >> 20} MiB") in texts(nb.cells[5])
    assert size([o for c in nb.cells for o in c.outputs]) <= NOTEBOOK_OUTPUT_MAX + 2 * ERROR_MAX + 8192
    # A test cell's error carries its diagnosis: kept (cut to ERROR_MAX) even past the notebook's cap.
    error = nb.cells[-1].outputs[0]
    assert error.output_type == "error" and error.evalue.startswith("diagnosis: sign — hhh")
    assert size(error) <= ERROR_MAX + 512
    assert len(nbformat.writes(nb).encode()) < NOTEBOOK_OUTPUT_MAX + MiB


def test_a_clear_output_frees_what_it_cleared_and_nothing_more(tmp_path):
    nb, _ = execute(notebook(
        "from IPython.display import clear_output\n"
        f"for i in range(6):\n    print(str(i) * {MiB // 2})\n    clear_output(wait=True)\nprint('last')"), tmp_path)
    assert texts(nb.cells[0]) == "last\n"


def test_errors_named_like_the_graders_stops_are_not_its_record(tmp_path):
    nb, reasons = execute(notebook(
        ("class GradingStopped(BaseException): pass\nraise GradingStopped('timeout: =HYPERLINK(\"x\")')", "test_a"),
        ("class NotRun(BaseException): pass\nraise NotRun('kernel died: <img src=x onerror=alert(1)>')", "test_b"),
        ("class CellTimeoutError(BaseException): pass\nraise CellTimeoutError()", "test_c"),
        ("raise MemoryError()", "test_d"),
    ), tmp_path)
    assert reasons == {}, "nothing stopped, timed out or was left unrun"
    path = tmp_path / "run.ipynb"
    nbformat.write(nb, path)
    errors = autograde._test_cells(path)[0]
    words = {g: autograde.reason_for(e, m, c) for g, (e, c, m) in errors.items()}
    own = "error: the test cell raised an exception of the submission's own, without a diagnosis"
    assert words == {"test_a": own, "test_b": own, "test_c": own,
                     "test_d": "memory limit: an allocation was refused (address-space limit)"}


def test_a_diagnosis_is_read_from_its_typed_record_never_from_text(tmp_path):
    record = lambda cls: nbformat.v4.new_output("display_data", data={contract.DIAGNOSIS_MIME: {  # noqa: E731
        "cls": cls, "sentence": "the gradient has the wrong sign"}})
    error = lambda text: nbformat.v4.new_output("error", ename="GradingFailure", traceback=[], evalue=text)  # noqa: E731
    nb = notebook(("x", "test_a"), ("x", "test_b"), ("x", "test_c"))
    nb.cells[0].outputs = [record("grader-crashed"), error("diagnosis: grader-crashed — ask for a regrade")]
    nb.cells[1].outputs = [record("sign"), error("anything at all")]
    nb.cells[2].outputs = [error("diagnosis: sign — the gradient has the wrong sign")]
    nbformat.write(nb, tmp_path / "a.ipynb")
    errors = autograde._test_cells(tmp_path / "a.ipynb")[0]
    assert [errors[g][1] for g in ("test_a", "test_b", "test_c")] == ["", "sign", ""]
    assert errors["test_b"][2] == "the gradient has the wrong sign"
    assert autograde.reason_for("GradingFailure", "x", "") == \
        "error: the test cell raised an exception of the submission's own, without a diagnosis"
    assert autograde.reason_for("NameError", "x", "") == "error: the test cell raised NameError, without a diagnosis"


def test_a_checks_record_survives_the_executor_only_in_a_test_cell_and_a_few_only(tmp_path, monkeypatch):
    monkeypatch.setenv(contract.RECORDS_ENV, "1")
    fail = ("from course.vocabulary import GradingFailure, publish\n"
            "f = GradingFailure('transpose', 'the result matches a transposed placement')\n"
            "publish(f)\nraise f")
    spam = "print('x' * (2 << 20))\nfrom IPython.display import display\n" + \
        f"for _ in range(3000): display({{{contract.DIAGNOSIS_MIME!r}: {{'cls': 'sign', 'sentence': 'x' * 400}}}}, raw=True)"
    nb, _ = execute(notebook(fail, (fail, "test_a"), (spam, "test_b")), tmp_path)
    mimes = lambda cell: [m for o in cell.outputs for m in o.get("data", {})]  # noqa: E731
    assert contract.DIAGNOSIS_MIME not in mimes(nb.cells[0]), "outside a test cell a record is no output the grader keeps"
    path = tmp_path / "run.ipynb"
    nbformat.write(nb, path)
    errors = autograde._test_cells(path)[0]
    assert errors["test_a"][1:] == ("transpose", "the result matches a transposed placement")
    records = [o.data[contract.DIAGNOSIS_MIME] for o in nb.cells[2].outputs if contract.DIAGNOSIS_MIME in o.get("data", {})]
    assert len(records) == nbexec.ERRORS_PER_CELL, "a test cell keeps as many records as errors, whatever its caps"


@pytest.mark.parametrize("stop, reason", [
    ("import time\ntime.sleep(60)", "timeout: the cell ran past 2 s and was interrupted"),
    ("import os\nos._exit(3)", "kernel died: the process exited with status 3"),
])
def test_a_stop_or_a_timeout_is_the_graders_record(tmp_path, stop, reason):
    nb, reasons = execute(notebook("x = 1", (stop, "test_stops"), ("print(x)", "test_later")), tmp_path, timeout=2)
    assert reasons["test_stops"].startswith(reason), reasons
    if reason.startswith("kernel died"):
        assert reasons["test_later"].endswith("(in an earlier cell; this one never ran)")
    else:
        assert "test_later" not in reasons and texts(nb.cells[2]) == "1\n", "an interrupted kernel goes on"


def test_a_tampering_reason_never_quotes_the_students_exception():
    found = autograde.grader_words({"status": "ok", "passed": False, "cls": "error",
                                 "message": "linear_backward raised GradingStopped: =HYPERLINK(\"x\")\n# h"})
    assert found["message"] == "the student's code raised an exception"
    record = {"cls": "sign", "sentence": "dx has the\nwrong sign", "where": "", "topic": None, "hint": None}
    found = autograde.grader_words({"status": "ok", "passed": False, "cls": "sign", "message": "dx has the wrong sign",
                                 "record": record, "cell_error": "NameError: <img>"})
    assert (found["cls"], found["message"]) == ("sign", "dx has the wrong sign")  # what a cell raised: its own field
    found = autograde.grader_words({"status": "ok", "passed": False, "cls": "sign", "message": "x",
                                 "record": {**record, "cls": "made-up"}})  # a record of no known class: none
    assert (found["cls"], found["message"]) == ("sign", "x")
    assert autograde.grader_words({"status": "ok", "cls": "made-up", "message": "x"})["cls"] == ""
    assert autograde.grader_words({"status": "timeout", "message": "a\nb " * 200})["message"] == ("a b " * 75)[:300]
