"""What an instructor reads after grading: grades.csv, students.csv, report.md and diagnoses.png (docs/grading.md, "Output").

Ids and reasons may carry text a submission shaped: every CSV cell is text to a spreadsheet
(:func:`csv_cell`), report.md quotes it as inert Markdown (:func:`md`), the chart's labels are never mathtext.
"""

from __future__ import annotations

import csv
import html
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

FIELDS = ("student", "assignment", "grade_id", "score", "max_score", "diagnosis", "reason", "seed")


@dataclass
class Row:
    student: str
    assignment: str
    grade_id: str
    score: float
    max_score: float
    diagnosis: str = ""
    reason: str = ""
    seed: int | None = None  # the hidden inputs' seed it was graded with (None: the notebook never ran)
    message: str = ""  # not a column: the hidden checks' sentence, for the feedback (grader.decide)
    passed: bool = False  # not a column: the kernel's outputs of this test cell hold no error (KernelOutcome)


@dataclass
class KernelOutcome(Row):
    """One test cell as the autograde run in the kernel graded it (``autograde.read_outcomes``): ``diagnosis``, the
    class of its diagnosis record; ``message``, the diagnosis sentence or the error's first line; ``score``, as
    nbgrader recorded it, which counts only where the kernel decides alone (``grader.decide``)."""


def outcome(row: Row) -> str:
    """What one row counts as in the summary: passed, a diagnosis class, or the kind of reason (its words before
    the first colon: "timeout", "kernel died", ...)."""
    if row.max_score > 0 and row.score >= row.max_score:
        return "passed"
    return row.diagnosis or row.reason.split(":", 1)[0].split("(", 1)[0].strip() or "failed without a diagnosis"


def exercise_name(grade_id: str) -> str:
    return grade_id.removeprefix("test_")


def _number(x: float) -> str:
    """A score exactly: 3, 1.5, 2.9999999999999996 (``:g`` would print the last as 3)."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


# A cell a spreadsheet would run as a formula starts with one of these (OWASP, "CSV Injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def csv_cell(value: str) -> str:
    """``value`` as a spreadsheet will read it: text, never a formula (a leading apostrophe, as OWASP says); one
    already starting with an apostrophe gets another, so :func:`csv_value` undoes exactly this."""
    if value[:1] == "'" or (value[:1] in _FORMULA_START and not _NUMBER.fullmatch(value)):
        return "'" + value
    return value


def csv_value(cell: str) -> str:
    """What :func:`csv_cell` was given."""
    return cell[1:] if cell[:1] == "'" else cell


def formula_safe(path: Path) -> None:
    """Rewrite a CSV file another tool wrote (``nbgrader export``) with every cell through :func:`csv_cell`."""
    with open(path, newline="") as f:
        write_cells(path, list(csv.reader(f)))


def write_cells(path: Path, rows) -> None:
    """A CSV file of ``rows`` (lists of text), every cell through :func:`csv_cell`."""
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([csv_cell(c) for c in row] for row in rows)


def md(text: object) -> str:
    """``text`` as inert Markdown: one line; no HTML, link, image, code span, maths or table break."""
    flat = " ".join(re.sub(r"[\x00-\x1f\x7f-\x9f]", " ", str(text)).split())
    return re.sub(r"([\\`\[\]|$])", r"\\\1", html.escape(flat, quote=False))


def write_csv(path: Path, rows: list[Row]) -> None:
    write_cells(path, [FIELDS] + [[r.student, r.assignment, r.grade_id, _number(r.score), _number(r.max_score), r.diagnosis,
                                   r.reason, "" if r.seed is None else str(r.seed)]
                                  for r in sorted(rows, key=lambda r: (r.student, r.grade_id))])


STUDENT_FIELDS = ("student", "assignment", "score", "max_score", "cells_passed", "cells")


def student_totals(rows: list[Row]) -> list[tuple[str, str, float, float, int, int]]:
    """One total per student and assignment, in student order: what the gradebook counts, summed over test cells."""
    totals: dict[tuple[str, str], list] = defaultdict(lambda: [0.0, 0.0, 0, 0])
    for r in rows:
        t = totals[r.student, r.assignment]
        t[0] += r.score
        t[1] += r.max_score
        t[2] += r.max_score > 0 and r.score >= r.max_score
        t[3] += 1
    return [(student, assignment, *t) for (student, assignment), t in sorted(totals.items())]


def write_student_csv(path: Path, rows: list[Row]) -> None:
    """students.csv: a student's total next to what it is out of (grades.csv has one row per test cell)."""
    write_cells(path, [STUDENT_FIELDS] + [[student, assignment, _number(score), _number(max_score), str(passed), str(cells)]
                                          for student, assignment, score, max_score, passed, cells in student_totals(rows)])


def read_csv(path: Path) -> list[Row]:
    with open(path, newline="") as f:
        return [Row(d["student"], d["assignment"], d["grade_id"], float(d["score"]), float(d["max_score"]),
                    d["diagnosis"], d["reason"], int(d["seed"]) if (d.get("seed") or "").isdigit() else None)
                for d in ({k: csv_value(v or "") for k, v in d.items()} for d in csv.DictReader(f))]


def summary_markdown(rows: list[Row], summary: dict) -> str:
    totals = student_totals(rows)  # rows of one assignment
    n, scores, out_of = len(totals), [t[2] for t in totals], max((t[3] for t in totals), default=0.0)
    a = summary.get("assignment", rows[0].assignment if rows else "")
    lines = [f"# {md(a)}: class report", ""]
    if scores:
        lines.append(f"{n} submissions, {out_of:g} points. Mean {statistics.mean(scores):.2f}, median "
                     f"{statistics.median(scores):g}, full marks {sum(1 for s in scores if s >= out_of)} of {n}.")
    secs = summary.get("seconds")
    if secs is not None:
        lines.append(f"Graded in {secs:.0f} s with {summary.get('workers', 1)} worker(s); sandbox isolation: "
                     f"{summary.get('isolation', '?')}.")
    lines += ["", "## Score distribution", "", "| total | students | |", "|---:|---:|:---|"]
    lines += [f"| {t:g} / {out_of:g} | {c} | {'█' * c} |" for t, c in sorted(Counter(scores).items(), reverse=True)]
    lines += ["", "## Exercises", ""]
    by_test = defaultdict(list)
    for r in rows:
        by_test[r.grade_id].append(r)
    for test_id, group in by_test.items():  # in the order the rows first name them
        name = md(exercise_name(test_id))
        counts = Counter(outcome(r) for r in group)
        pts = max(r.max_score for r in group)
        lines += [f"### {name} ({pts:g} points): {counts.get('passed', 0)} of {len(group)} full marks", ""]
        lines += [f"- {count} of {len(group)}: {md(what)} in {name}"
                  for what, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if what != "passed"] + [""]
    odd = [r for r in rows if r.reason]
    if odd:
        lines += ["## Zeros with a reason", "", "| student | test cell | reason |", "|---|---|---|"]
        lines += [f"| {md(r.student)} | {md(r.grade_id)} | {md(r.reason)} |"
                  for r in sorted(odd, key=lambda r: (r.student, r.grade_id))] + [""]
    unsupported = {t: why for t, why in (summary.get("supported") or {}).items() if why}
    lines += ["## Hidden checks", ""]
    if summary.get("supported") is None:
        lines.append("Run in the student's kernel (--no-trusted): in-kernel results only, which the student's code "
                     "can reach.")
    elif unsupported:
        lines.append("Every exercise's hidden checks ran in the trusted checker, outside the student's process, except:")
        lines += [f"- {md(exercise_name(t))}: {md(why)}" for t, why in sorted(unsupported.items())]
    else:
        lines.append("Every exercise's hidden checks ran in the trusted checker, outside the student's process; the "
                     "kernel ran the visible checks only (a reply the checker refused shows as `tampering`).")
    if summary.get("feedback"):
        lines += ["", f"Feedback: {md(summary['feedback'])}."]
    return "\n".join(lines) + "\n"


def chart(path: Path, rows: list[Row], title: str) -> None:
    """One horizontal stacked bar per exercise: students per outcome (passed, each class, each reason)."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tests = list(dict.fromkeys(r.grade_id for r in rows))
    counts = {t: Counter(outcome(r) for r in rows if r.grade_id == t) for t in tests}
    kinds = ["passed"] + sorted({k for c in counts.values() for k in c} - {"passed"})
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(tests) + 1.8))
    left = [0] * len(tests)
    # Green means passed and nothing else: the failure kinds take tab20's other colours.
    cmap = plt.get_cmap("tab20")
    palette = [cmap(i) for i in range(20) if i not in (4, 5)]
    for i, kind in enumerate(kinds):
        values = [counts[t].get(kind, 0) for t in tests]
        color = "#4caf50" if kind == "passed" else palette[(i - 1) % len(palette)]
        # Labels are text, never mathtext: a "$" from a row would make matplotlib parse (and fail on) maths.
        ax.barh([exercise_name(t).replace("$", r"\$") for t in tests], values, left=left,
                label=kind.replace("$", r"\$"), color=color)
        left = [a + b for a, b in zip(left, values)]
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("students")
    ax.set_title(title.replace("$", r"\$"))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=4, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(out: Path, rows: list[Row], summary: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "grades.csv", rows)
    write_student_csv(out / "students.csv", rows)
    (out / "report.md").write_text(summary_markdown(rows, summary))
    chart(out / "diagnoses.png", rows, f"{summary.get('assignment', '')}: outcome per exercise")

