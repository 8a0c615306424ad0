"""Build the instructor notebooks in source/ from their plain-text twins in notebooks/.

Each ``notebooks/NN_slug.py`` is the reviewable original of
``source/NN_slug/NN_slug.ipynb``. Cells are separated by ``# %%`` markers:

    # %% [markdown]                          a markdown cell; each line starts with "# "
    # %%                                     a code cell
    # %% solution id=linear_backward         a graded answer cell (grade_id = the function)
    # %% test id=test_linear_backward points=2
    #                                        a locked test cell worth 2 points
    # %% check-output                        a code cell whose printed output nbval compares

Cell ids are the grade_id for graded cells and ``cell-NN`` by position otherwise, so a
rebuild without edits changes nothing. Cells marked ``check-output`` are executed once
during the build and keep their output with execution count 1 (nbval needs a stored,
counted output to compare); every other cell is stored without output or count.

Usage: python tools/build_notebooks.py [--check] [NN_slug ...]
``--check`` builds in memory and exits 1 if any source notebook differs from its twin.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import nbformat

from autograder.nbgrader_cli import ROOT

TEXT_DIR = ROOT / "notebooks"
SOURCE_DIR = ROOT / "source"

MARKER = re.compile(r"^# %%(?P<rest>.*)$")
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {"name": "python", "version": "3.11"}
NBVAL_TAG = "nbval-check-output"


def _options(rest: str) -> tuple[str, dict[str, str]]:
    words = rest.split()
    kind = "code"
    opts: dict[str, str] = {}
    for word in words:
        if word == "[markdown]":
            kind = "markdown"
        elif "=" in word:
            key, value = word.split("=", 1)
            opts[key] = value
        elif word in ("solution", "test", "check-output"):
            kind = word
        else:
            raise ValueError(f"unknown cell option {word!r} in marker '# %%{rest}'")
    return kind, opts


def _markdown_source(lines: list[str]) -> str:
    out = []
    for line in lines:
        if line.startswith("# "):
            out.append(line[2:])
        elif line.rstrip() == "#":
            out.append("")
        else:
            raise ValueError(f"markdown lines must start with '# ': {line!r}")
    return "\n".join(out).strip("\n")


def parse(text: str, name: str) -> list[nbformat.NotebookNode]:
    """Split a notebooks/*.py file into notebook cells with nbgrader metadata."""
    chunks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        m = MARKER.match(line)
        if m:
            chunks.append((m.group("rest"), []))
        elif chunks:
            chunks[-1][1].append(line)
        elif line.strip():
            raise ValueError(f"{name}: text before the first '# %%' marker: {line!r}")
    cells = []
    seen_ids: set[str] = set()
    for index, (rest, lines) in enumerate(chunks):
        kind, opts = _options(rest)
        if kind == "markdown":
            cell = nbformat.v4.new_markdown_cell(_markdown_source(lines))
        else:
            cell = nbformat.v4.new_code_cell("\n".join(lines).strip("\n"))
        cell_id = opts.get("id", f"cell-{index:02d}")
        if cell_id in seen_ids:
            raise ValueError(f"{name}: duplicate cell id {cell_id!r}")
        seen_ids.add(cell_id)
        cell["id"] = cell_id
        if kind == "solution":
            cell.metadata["nbgrader"] = {
                "grade": False, "grade_id": cell_id, "locked": False,
                "schema_version": 3, "solution": True, "task": False,
            }
        elif kind == "test":
            if "points" not in opts:
                raise ValueError(f"{name}: test cell {cell_id} needs points=N")
            cell.metadata["nbgrader"] = {
                "grade": True, "grade_id": cell_id, "locked": True, "points": int(opts["points"]),
                "schema_version": 3, "solution": False, "task": False,
            }
        elif kind == "check-output":
            cell.metadata["tags"] = [NBVAL_TAG]
        cells.append(cell)
    return cells


def build(slug: str, execute: bool = True) -> nbformat.NotebookNode:
    text_path = TEXT_DIR / f"{slug}.py"
    nb = nbformat.v4.new_notebook()
    nb.nbformat_minor = 5
    nb.metadata = {"kernelspec": KERNELSPEC, "language_info": LANGUAGE_INFO}
    nb.cells = parse(text_path.read_text(), text_path.name)
    if execute and any(NBVAL_TAG in c.metadata.get("tags", []) for c in nb.cells):
        _fill_checked_outputs(nb, SOURCE_DIR / slug)
    return nb


def _fill_checked_outputs(nb: nbformat.NotebookNode, cwd: Path) -> None:
    """Run the notebook once and keep outputs only where nbval will compare them."""
    from nbclient import NotebookClient

    cwd.mkdir(parents=True, exist_ok=True)
    ran = nbformat.from_dict(json.loads(json.dumps(nb)))
    NotebookClient(ran, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    for cell, done in zip(nb.cells, ran.cells):
        if cell.cell_type == "code" and NBVAL_TAG in cell.metadata.get("tags", []):
            # nbval refuses a stored output without an execution count ("unrun reference cell");
            # a constant count keeps rebuilds byte-identical.
            cell.execution_count = 1
            cell.outputs = [_clean_output(o) for o in done.outputs]


def _clean_output(output):
    output = dict(output)
    if output.get("output_type") == "execute_result":
        output["execution_count"] = 1
    return nbformat.from_dict(output)


def dumps(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def slugs(requested: list[str]) -> list[str]:
    available = sorted(p.stem for p in TEXT_DIR.glob("[0-9][0-9]_*.py"))
    unknown = sorted(set(requested) - set(available))
    if unknown:
        raise SystemExit(f"no notebooks/{unknown[0]}.py; available: {', '.join(available)}")
    return requested or available


def _comparable(nb_text: str) -> list:
    """Cells without outputs or counts: what the text twin decides (execution fills in the rest)."""
    nb = json.loads(nb_text)
    return [{k: v for k, v in cell.items() if k not in ("outputs", "execution_count")} for cell in nb["cells"]] + [nb["metadata"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("slugs", nargs="*", help="e.g. 00_vjp_contract (default: all)")
    parser.add_argument("--check", action="store_true", help="only report notebooks that are out of date")
    args = parser.parse_args(argv)
    stale = []
    for slug in slugs(args.slugs):
        target = SOURCE_DIR / slug / f"{slug}.ipynb"
        if args.check:
            fresh = dumps(build(slug, execute=False))
            if not target.exists() or _comparable(target.read_text()) != _comparable(fresh):
                stale.append(str(target.relative_to(ROOT)))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(dumps(build(slug)))
        print(f"wrote {target.relative_to(ROOT)}")
    if stale:
        print("out of date (run `make notebooks`): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
