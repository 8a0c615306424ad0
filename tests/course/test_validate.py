"""``python -m course validate``: the student's own check of a whole notebook, from the student side.

The real release notebook 00 runs twice in one command: as handed out (every check
not implemented) and with Part A solved by an answer written here from the lesson's
formula (central differences), not read from source/. A small notebook made here
covers the rest of the table: a pass, a diagnosis, a crash, stderr, exit 0.

A notebook that replaces ``course.selfcheck`` (in a cell of its own, or inside a solution cell)
gets the table it would get without: each check that passed in the kernel runs again in
validate's own process (course/recheck.py), where the notebook's code cannot reach it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import nbformat
import pytest

from autograder.nbgrader_cli import ROOT, with_bin
from course import validate

SLUG = "00_vjp_contract"
RELEASE = ROOT / "release" / SLUG / f"{SLUG}.ipynb"

# Lesson 00, Part A: x̄_i ≈ (f(x + ε e_i) − f(x − ε e_i)) / 2ε, in float64, x left as it was.
CENTRAL_DIFFERENCES = '''
def numerical_gradient(f, x, eps=1e-6):
    base = x.detach().to(torch.float64).reshape(-1).clone()
    grad = torch.empty_like(base)
    for i in range(base.numel()):
        step = torch.zeros_like(base)
        step[i] = eps
        up = float(f((base + step).reshape(x.shape)))
        down = float(f((base - step).reshape(x.shape)))
        grad[i] = (up - down) / (2 * eps)
    return grad.reshape(x.shape)
'''


# Lesson 00's other three parts, from its formulas: rel = ‖a − b‖ / max(‖a‖, ‖b‖) (Part B's five properties),
# the mean cross-entropy's x̄, W̄, b̄ through (softmax − onehot) / B, and σ' = y (1 − y).
REST_OF_00 = {
    "relative_error": '''
def relative_error(a, b):
    a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)
    size = max(float(a.norm()), float(b.norm()))
    return 0.0 if size == 0 else float((a - b).norm()) / size
''',
    "linear_softmax_ce_backward": '''
def linear_softmax_ce_backward(x, W, b, target):
    p = torch.softmax(x @ W + b, dim=-1)
    dz = (p - torch.nn.functional.one_hot(target, p.shape[-1]).to(p.dtype)) / x.shape[0]
    return dz @ W.T, x.T @ dz, dz.sum(0)
''',
    "sigmoid_backward": '''
def sigmoid_backward(y, dy):
    return dy * y * (1 - y)
''',
}

# Every check of course.selfcheck a no-op, and the checks' helper that calls the student's function too.
NO_OP_CHECKS = '''
import course.diagnose, course.selfcheck
for _name in dir(course.selfcheck):
    if callable(getattr(course.selfcheck, _name)) and not _name.startswith("_"):
        setattr(course.selfcheck, _name, lambda *args, **kwargs: None)
course.diagnose.call_student = lambda name, fn, *args, **kwargs: None
'''


def course_validate(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = with_bin({k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    return subprocess.run(
        [sys.executable, "-m", "course", "validate", *args],
        cwd=cwd or ROOT, env=env, capture_output=True, text=True, timeout=600,
    )


def rows_of(stdout: str, notebook: str) -> dict[str, tuple[str, str]]:
    """grade_id -> (points, result) from the table printed for ``notebook``."""
    block = stdout.split(f"\n{notebook}\n", 1)[1].split("points would pass", 1)[0]
    found = {}
    for line in block.splitlines():
        m = re.match(r"^  (test_\w+)\s+(\d+)  (.*)$", line)
        if m:
            found[m.group(1)] = (m.group(2), m.group(3))
    return found


def solved_copy(tmp_path, answers=None, folder="solved", after_import=""):
    """Release notebook 00 with ``answers`` (grade_id -> the solution cell's code) in place of their stubs, and
    ``after_import`` as a cell of its own after the first cell that imports course."""
    answers = {"numerical_gradient": CENTRAL_DIFFERENCES} if answers is None else answers
    nb = nbformat.read(RELEASE, as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id].strip()
    if after_import:
        first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "import course" in c.source)
        nb.cells.insert(first + 1, nbformat.v4.new_code_cell(after_import.strip()))
    path = tmp_path / folder / f"{SLUG}.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    return path


def stub_of(grade_id: str) -> str:
    nb = nbformat.read(RELEASE, as_version=4)
    return next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


@pytest.mark.timeout(600)
def test_a_notebook_that_replaces_the_checks_gets_its_true_table(tmp_path):
    """Stubs unsolved (but Part A, answered honestly) and every check a no-op: in a cell of its own, or inside
    a solution cell. The kernel's own outputs say ✓ everywhere; the table says what the checks say."""
    own_cell = solved_copy(tmp_path, folder="own_cell", after_import=NO_OP_CHECKS)
    in_solution = solved_copy(tmp_path, folder="in_solution",
                              answers={"relative_error": stub_of("relative_error") + "\n" + NO_OP_CHECKS})
    done = course_validate(str(own_cell), str(in_solution))
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout

    cheated = ["test_relative_error", "test_linear_softmax_ce_backward", "test_sigmoid_backward"]
    assert rows_of(out, str(own_cell)) == {"test_numerical_gradient": ("2", "✓"),
                                           **{t: (p, "✗ not implemented yet") for t, p in zip(cheated, "132")}}, out
    assert "  2 of 8 points would pass the visible checks\n  note: " + ", ".join(cheated) + " passed inside" in out, out
    assert rows_of(out, str(in_solution)) == {
        "test_numerical_gradient": ("2", "✗ not implemented yet"),
        **{t: (p, "✗ not implemented yet") for t, p in zip(cheated, "132")}}, out
    assert "  0 of 8 points would pass the visible checks" in out, out


@pytest.mark.timeout(600)
def test_an_honest_notebook_keeps_full_marks_when_re_checked(tmp_path):
    """All four parts answered from the lesson's formulas: every check passes in the kernel and again outside it
    (Part A's check hands the student's function a function of its own, called back across the two processes)."""
    honest = solved_copy(tmp_path, answers={"numerical_gradient": CENTRAL_DIFFERENCES, **REST_OF_00})
    done = course_validate(str(honest))
    assert done.returncode == 0, done.stdout + done.stderr
    parts = ["test_numerical_gradient", "test_relative_error", "test_linear_softmax_ce_backward", "test_sigmoid_backward"]
    assert rows_of(done.stdout, str(honest)) == {t: (p, "✓") for t, p in zip(parts, "2132")}, done.stdout
    assert "  8 of 8 points would pass the visible checks" in done.stdout and "note:" not in done.stdout, done.stdout


@pytest.mark.timeout(600)
def test_release_notebook_then_one_exercise_solved(tmp_path):
    untouched = tmp_path / "untouched" / f"{SLUG}.ipynb"
    untouched.parent.mkdir()
    untouched.write_bytes(RELEASE.read_bytes())
    solved = solved_copy(tmp_path)
    before = untouched.read_bytes()

    done = course_validate(str(untouched), str(solved))
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout

    as_released = rows_of(out, str(untouched))
    assert as_released == {
        "test_numerical_gradient": ("2", "✗ not implemented yet"),
        "test_relative_error": ("1", "✗ not implemented yet"),
        "test_linear_softmax_ce_backward": ("3", "✗ not implemented yet"),
        "test_sigmoid_backward": ("2", "✗ not implemented yet"),
    }, out
    assert f"{untouched}\n" in out and "  0 of 8 points would pass the visible checks" in out, out

    one_solved = rows_of(out, str(solved))
    assert one_solved["test_numerical_gradient"] == ("2", "✓"), out
    assert one_solved["test_relative_error"] == ("1", "✗ not implemented yet"), out
    assert one_solved["test_linear_softmax_ce_backward"] == ("3", "✗ not implemented yet"), out
    assert one_solved["test_sigmoid_backward"] == ("2", "✗ not implemented yet"), out
    assert "  2 of 8 points would pass the visible checks" in out, out
    assert untouched.read_bytes() == before, "validate only reads the student's notebook"


def test_a_wrong_answer_shows_its_diagnosis_line(tmp_path):
    """Central differences with one side only (f(x + ε) − f(x)) / ε: the classic first bug, named."""
    nb = nbformat.read(RELEASE, as_version=4)
    keep = []
    for cell in nb.cells:  # the lesson up to Part A's check: enough to run it, quick
        keep.append(cell)
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "test_numerical_gradient":
            break
    nb.cells = keep
    solution = next(c for c in keep if c.metadata.get("nbgrader", {}).get("grade_id") == "numerical_gradient")
    solution.source = CENTRAL_DIFFERENCES.strip().replace("(up - down) / (2 * eps)", "(up - float(f(x))) / eps")
    path = tmp_path / f"{SLUG}.ipynb"
    nbformat.write(nb, path)

    done = course_validate(str(path))
    assert done.returncode == 1, done.stdout + done.stderr
    points, result = rows_of(done.stdout, str(path))["test_numerical_gradient"]
    assert points == "2" and re.match(r"✗ diagnosis: [a-z-]+ — \S", result), done.stdout
    assert "\n" not in result and "0 of 2 points" in done.stdout


def small_notebook(path, cells):
    """A notebook of code cells; ``cells`` holds (source, grade_id or None, points)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for source, grade_id, points in cells:
        cell = nbformat.v4.new_code_cell(source)
        if grade_id:
            cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "locked": True, "points": points,
                                         "solution": False, "schema_version": 3, "task": False}
        nb.cells.append(cell)
    nbformat.write(nb, path)
    return path


def test_each_kind_of_result_in_one_table(tmp_path):
    path = small_notebook(tmp_path / "kinds.ipynb", [
        ("class GradingFailure(AssertionError): pass", None, 0),
        ("assert 1 + 1 == 2", "test_passes", 2),
        ("raise GradingFailure('diagnosis: sign — dx is the negative of the right answer.\\nfirst mismatch at dx[0]')",
         "test_diagnosed", 3),
        ("raise NotImplementedError('write it')", "test_stub", 1),
        ("1 / 0", "test_crashes", 1),
        ("import sys; sys.stderr.write('careful\\n')", "test_warns", 1),
        ("print('a later cell still runs')", None, 0),
    ])
    done = course_validate(str(path), "--timeout", "60")
    assert done.returncode == 1, done.stdout + done.stderr
    assert rows_of(done.stdout, str(path)) == {
        "test_passes": ("2", "✓"),
        "test_diagnosed": ("3", "✗ diagnosis: sign — dx is the negative of the right answer."),
        "test_stub": ("1", "✗ not implemented yet"),
        "test_crashes": ("1", "✗ ZeroDivisionError: division by zero"),
        "test_warns": ("1", "✗ wrote to stderr (nbgrader scores that zero): careful"),
    }, done.stdout
    assert "  2 of 8 points would pass the visible checks" in done.stdout, done.stdout


def test_a_cell_past_the_timeout_is_interrupted_and_the_rest_still_runs(tmp_path):
    path = small_notebook(tmp_path / "slow.ipynb", [
        ("import time\ntime.sleep(60)", "test_slow", 1), ("assert True", "test_after", 1),
    ])
    done = course_validate(str(path), "--timeout", "3")
    assert done.returncode == 1, done.stdout + done.stderr
    assert rows_of(done.stdout, str(path)) == {
        "test_slow": ("1", "✗ interrupted: the cell ran past the time limit (--timeout)"),
        "test_after": ("1", "✓"),
    }, done.stdout


def test_a_re_check_that_hangs_is_interrupted_and_one_that_ends_the_kernel_stops_the_notebook(tmp_path):
    """The check patched away in the kernel, so only the re-check calls the student's function: one sleeps past
    --timeout (interrupted, the rest still runs), one ends the kernel (the rest is not run)."""
    patch = "import course\ncourse.selfcheck.sigmoid_backward = lambda fn: None"
    check = "course.selfcheck.sigmoid_backward(sigmoid_backward)"
    hangs = small_notebook(tmp_path / "hangs.ipynb", [
        (patch, None, 0), ("def sigmoid_backward(y, dy):\n    import time\n    time.sleep(600)", None, 0),
        (check, "test_sigmoid_backward", 2), ("assert True", "test_after", 1),
    ])
    dies = small_notebook(tmp_path / "dies.ipynb", [
        (patch, None, 0), ("def sigmoid_backward(y, dy):\n    import os\n    os._exit(1)", None, 0),
        (check, "test_sigmoid_backward", 2), ("assert True", "test_after", 1),
    ])
    # --timeout holds every cell, the first one's `import course` too: about 4 s on two loaded cores, so 5 s
    # interrupted it now and then (a NameError after). 15 s leaves it room; the re-check still sleeps far past it.
    done = course_validate(str(hangs), str(dies), "--timeout", "15")
    assert done.returncode == 1, done.stdout + done.stderr
    assert rows_of(done.stdout, str(hangs)) == {
        "test_sigmoid_backward": ("2", "✗ interrupted: the re-check ran past the time limit (--timeout)"),
        "test_after": ("1", "✓"),
    }, done.stdout
    died = rows_of(done.stdout, str(dies))
    assert died["test_sigmoid_backward"][1].startswith("✗ the re-check stopped: the kernel closed the connection"), done.stdout
    assert died["test_after"] == ("1", "✗ not run: the kernel died (in this cell or an earlier one)"), done.stdout


def test_exit_0_when_every_check_passes(tmp_path):
    path = small_notebook(tmp_path / "all_pass.ipynb", [
        ("x = 2", None, 0), ("assert x == 2", "test_a", 1), ("assert x * x == 4", "test_b", 2),
    ])
    done = course_validate(str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "  3 of 3 points would pass the visible checks" in done.stdout, done.stdout


@pytest.mark.parametrize("make, says", [
    (lambda tmp: tmp / "missing.ipynb", "no such file"),
    (lambda tmp: tmp, "is a folder"),
    (lambda tmp: _write(tmp / "notes.txt", "just some text"), "not a notebook"),
    (lambda tmp: _write(tmp / "list.ipynb", "[1, 2, 3]"), "not a notebook"),
    (lambda tmp: small_notebook(tmp / "plain.ipynb", [("x = 1", None, 0)]), "without graded test cells"),
])
def test_a_bad_argument_exits_2_naming_it(tmp_path, make, says):
    bad = make(tmp_path)
    done = course_validate(str(RELEASE), str(bad))  # a good notebook first: nothing runs before the check
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"python -m course validate: {bad}: ") and says in done.stderr, done.stderr
    assert "validating" not in done.stdout, "no notebook ran"


def test_python_m_course_without_a_known_command():
    env = with_bin(dict(os.environ))
    done = subprocess.run([sys.executable, "-m", "course", "grade"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "unknown command 'grade'" in done.stderr and "validate" in done.stderr


def test_failure_reads_nbgraders_signals_only():
    assert validate.failure([{"output_type": "stream", "name": "stdout", "text": "✓ fine\n"}]) == ""
    stub = {"output_type": "error", "ename": "ExerciseNotDone", "evalue": "`f` is yours to write"}
    assert validate.failure([stub]) == validate.NOT_IMPLEMENTED


def _write(path, text):
    path.write_text(text)
    return path
