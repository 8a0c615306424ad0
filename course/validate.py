"""Validate a notebook from the student side: ``python -m course validate NOTEBOOK [NOTEBOOK ...]``.

Each notebook runs top to bottom in a fresh kernel, in its own folder, as Run All would
(errors do not stop it; a cell that runs past ``--timeout`` seconds is interrupted). The
student's file is only read: the outputs stay in memory. Then one table per notebook:
a row per graded test cell (nbgrader's ``grade: true``) with its points and ``✓``, or
``✗`` and the first line of its ``diagnosis:`` ("not implemented yet" for a stub that
still raises), and the points that would pass the visible checks.

A cell passes as nbgrader scores it (no error output, nothing on stderr) and only if its checks
pass again out of the notebook's reach (docs/grading.md, "The student's own check"). The hidden
tests are not in a student's notebook, so a pass here is necessary, not sufficient.

Exit status: 0 when every test cell of every notebook passes, 1 otherwise, 2 for a bad
argument (a missing file, a file that is not a notebook, a notebook without test cells).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from . import recheck

DEFAULT_TIMEOUT_S = 120  # per cell, as the grader allows (nbgrader_config.py)
NOT_IMPLEMENTED = "not implemented yet"
STUB_ERRORS = ("ExerciseNotDone", "NotImplementedError")  # course.todo()'s exception and its base


class BadArgument(Exception):
    """A command-line argument that cannot be validated; the message names it."""


@dataclass(frozen=True)
class Row:
    grade_id: str
    points: float
    passed: bool
    why: str = ""  # for a failure: the diagnosis line, or what went wrong
    rechecked: bool = False  # passed in the kernel, failed when re-checked out of the notebook's reach


def is_test_cell(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def load(argument: str) -> nbformat.NotebookNode:
    """The notebook at ``argument``, or :class:`BadArgument` saying what is wrong with it."""
    path = Path(argument)
    if not path.exists():
        raise BadArgument(f"{argument}: no such file; expected the path of a notebook (.ipynb)")
    if not path.is_file():
        raise BadArgument(f"{argument}: is a folder; expected the path of a notebook (.ipynb)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BadArgument(f"{argument}: not a notebook (it does not read as JSON: {_first_line(str(exc))})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise BadArgument(f"{argument}: not a notebook (JSON without a list of cells)")
    try:
        nb = nbformat.reads(json.dumps(data), as_version=4)
    except Exception as exc:  # nbformat refuses it: a notebook format it cannot read
        raise BadArgument(f"{argument}: not a notebook nbformat can read ({type(exc).__name__}: {_first_line(str(exc))})") from None
    if not any(is_test_cell(c) for c in nb.cells):
        raise BadArgument(f"{argument}: a notebook without graded test cells; expected one of the course's notebooks")
    return nb


def run(nb: nbformat.NotebookNode, folder: Path, timeout_s: int) -> tuple[str, dict[int, str]]:
    """Execute ``nb`` in place in a fresh kernel started in ``folder``, re-checking each test cell that passed.

    Returns why it stopped early ('' when it did not), and for each re-checked cell that failed
    there (by its index), the failure line.
    """
    from nbclient import NotebookClient  # here, not at import: `import course` must not need it
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from nbclient.util import ensure_async

    listener = recheck.Listener()
    failed: dict[int, str] = {}

    async def recheck_cell(cell, cell_index, execute_reply) -> None:
        if not is_test_cell(cell) or failure(cell.get("outputs", [])):
            return  # only a pass can be wrong: a failure in the kernel stands
        checks = recheck.checks_of(cell.source, str(cell.metadata["nbgrader"].get("grade_id", "")))
        if not checks:
            return
        # Failed until the re-check says otherwise: a kernel that dies or hangs meanwhile leaves no pass behind.
        failed[cell_index] = "not run: the re-check did not finish"
        msg_id = client.kc.execute(listener.code(), silent=True, store_history=False, allow_stdin=False, stop_on_error=False)
        why, stuck = recheck_here(listener, checks, timeout_s)
        if why:
            failed[cell_index] = why
        else:
            del failed[cell_index]
        if stuck:
            await ensure_async(client.km.interrupt_kernel())
        # The kernel's reply ends its serving; none within the timeout (after an interrupt) stops the notebook.
        if await client.async_wait_for_reply(msg_id) is None:
            raise CellTimeoutError(f"the re-check's request to the kernel ran past {timeout_s} s")

    # python3, whatever kernel the notebook last ran in: jupyter_client starts it with this very
    # Python, so the checks run where `python -m course` runs, with the same torch and course.
    client = NotebookClient(
        nb, timeout=timeout_s, interrupt_on_timeout=True, allow_errors=True, kernel_name="python3",
        resources={"metadata": {"path": str(folder)}}, on_cell_executed=recheck_cell,
        # As nbgrader runs it: no history database written; the kernel's own start-up log kept quiet.
        extra_arguments=["--HistoryManager.hist_file=:memory:", "--IPKernelApp.log_level=ERROR"],
    )
    try:
        client.execute()
    except DeadKernelError:
        return "not run: the kernel died (in this cell or an earlier one)", failed
    except CellTimeoutError:
        return f"not run: a cell ran past {timeout_s} s and ignored the interrupt (this cell or an earlier one)", failed
    finally:
        listener.close()
    return "", failed


def recheck_here(listener: recheck.Listener, checks: list[tuple[str, str]], timeout_s: int) -> tuple[str, bool]:
    """Run ``checks`` in this process while the kernel serves the student's objects (it was just asked to).

    Returns '' when all pass, else why the first did not; and whether the kernel is stuck in the
    notebook's code past ``timeout_s`` (the caller interrupts it, as it would a cell).
    """
    channel = None
    try:
        channel = listener.accept(timeout_s)
        for check, arg in checks:
            raised = recheck.run_check(channel, check, arg, timeout_s)
            if raised is not None:
                return failure([{"output_type": "error", "ename": type(raised).__name__, "evalue": str(raised)}]), False
        return "", False
    except recheck.Timeout:
        return "interrupted: the re-check ran past the time limit (--timeout)", True
    except recheck.Gone as exc:
        return f"the re-check stopped: {exc}", False
    finally:
        if channel is not None:
            channel.done()  # the kernel's serving ends (at once, unless it is stuck in the notebook's code)


def rows(nb: nbformat.NotebookNode, stopped: str = "", rechecked: dict[int, str] | None = None) -> list[Row]:
    """One row per graded test cell of an executed notebook; ``rechecked``: the failures of :func:`run`'s re-check."""
    found = []
    for index, cell in enumerate(nb.cells):
        if not is_test_cell(cell):
            continue
        meta = cell.metadata["nbgrader"]
        grade_id, points = meta.get("grade_id", "?"), float(meta.get("points", 0))
        if stopped and cell.get("execution_count") is None:  # no reply came: it did not finish
            found.append(Row(grade_id, points, False, stopped))
            continue
        why = failure(cell.get("outputs", []))
        if not why and (rechecked or {}).get(index):
            found.append(Row(grade_id, points, False, rechecked[index], rechecked=True))
            continue
        found.append(Row(grade_id, points, not why, why))
    return found


def failure(outputs: list) -> str:
    """'' when nbgrader would give the cell its points; else one line saying why not."""
    for out in outputs:
        if out.get("output_type") == "error":
            ename, evalue = out.get("ename", "Error"), str(out.get("evalue", ""))
            if ename in STUB_ERRORS or evalue.startswith("diagnosis: not-implemented"):
                return NOT_IMPLEMENTED
            if ename == "KeyboardInterrupt":
                return "interrupted: the cell ran past the time limit (--timeout)"
            diagnosis = next((ln for ln in evalue.splitlines() if ln.startswith("diagnosis:")), "")
            return diagnosis or f"{ename}: {_first_line(evalue)}".rstrip(": ")
    for out in outputs:
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            return f"wrote to stderr (nbgrader scores that zero): {_first_line(out.get('text', ''))}"
    return ""


def table(name: str, found: list[Row]) -> str:
    """The summary a student reads: a row per test cell, then the points that would pass."""
    width = max(len("test cell"), *(len(r.grade_id) for r in found))
    lines = [name, f"  {'test cell':<{width}}  points  result"]
    for r in found:
        result = "✓" if r.passed else f"✗ {r.why}"
        lines.append(f"  {r.grade_id:<{width}}  {r.points:>6g}  {result}")
    passed = sum(r.points for r in found if r.passed)
    total = sum(r.points for r in found)
    lines.append(f"  {passed:g} of {total:g} points would pass the visible checks")
    changed = [r.grade_id for r in found if r.rechecked]
    if changed:
        lines.append(f"  note: {', '.join(changed)} passed inside the notebook but not when re-checked outside it, where "
                     "the notebook's code cannot change the checks")
    return "\n".join(lines)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course validate",
        description="Run each notebook top to bottom in a fresh kernel and say which graded checks pass.",
    )
    parser.add_argument("notebooks", nargs="+", metavar="NOTEBOOK",
                        help="a course notebook (.ipynb), e.g. your copy of 00_vjp_contract.ipynb")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"the longest one cell may run before it is interrupted (default {DEFAULT_TIMEOUT_S})")
    args = parser.parse_args(argv)
    if args.timeout < 1:
        parser.error(f"--timeout must be at least 1 second, got {args.timeout}")
    try:  # every argument checked before anything runs: a typo should not cost a whole run first
        loaded = [(Path(a), load(a)) for a in args.notebooks]
    except BadArgument as exc:
        print(f"python -m course validate: {exc}", file=sys.stderr)
        return 2
    all_passed = True
    for path, nb in loaded:
        print(f"validating {path}: running it top to bottom in a fresh kernel …", flush=True)
        stopped, rechecked = run(nb, path.resolve().parent, args.timeout)
        found = rows(nb, stopped, rechecked)
        print(table(str(path), found), flush=True)
        all_passed &= all(r.passed for r in found)
    return 0 if all_passed else 1
