"""Submissions per minute for one class, graded on the local pool and on a local 2-worker Dask cluster, in one run.

    python -m tools.bench_cluster [--assignment 01_matmul_from_shapes] [--copies 8] [--out bench/cluster.json]

The class is ``--copies`` copies of the assignment's solved notebook, graded twice into two
copies of the course, with the same seed: once with ``--workers 2`` (the local pool), once
with ``--scheduler`` on a LocalCluster of two single-threaded worker processes started here.
Each run is the real command, start to end: collecting, the preflight (each run pays one, in
a course folder of its own), the jobs, the outputs; the cluster's run also pays for starting
its workers' zygotes. docs/grading.md ("Beyond one machine") quotes the result.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from autograder.nbgrader_cli import ROOT, copy_course
from tools.mutants import source_notebook


def _class(where: Path, assignment: str, copies: int) -> Path:
    subs = where / "submissions"
    for i in range(copies):
        (subs / f"student{i:02d}").mkdir(parents=True)
        nbformat.write(source_notebook(assignment), subs / f"student{i:02d}" / f"{assignment}.ipynb")
    return subs


def _grade(assignment: str, subs: Path, where: Path, *extra: str) -> dict:
    course, out = copy_course(where / "course", [assignment]), where / "out"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", assignment, "--submissions", str(subs),
                           "--course", str(course), "--out", str(out), "--quiet", "--no-feedback", "--seed", "0",
                           *extra], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"grading failed:\n{done.stderr[-3000:]}")
    import csv

    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    if any(r["score"] != r["max_score"] for r in rows):
        raise SystemExit("a solved notebook lost points: the figures would mean nothing")
    return {"wall_s": round(wall, 1), "rows": len(rows)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--assignment", default="01_matmul_from_shapes")
    p.add_argument("--copies", type=int, default=8)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    from distributed import LocalCluster

    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    try:
        subs = _class(tmp, args.assignment, args.copies)
        local = _grade(args.assignment, subs, tmp / "local", "--workers", "2")
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            remote = _grade(args.assignment, subs, tmp / "cluster", "--scheduler", cluster.scheduler_address)
        figures = {"assignment": args.assignment, "submissions": args.copies,
                   "local_pool_2_workers": local, "dask_local_cluster_2_workers": remote}
        for name in ("local_pool_2_workers", "dask_local_cluster_2_workers"):
            figures[name]["submissions_per_minute"] = round(60 * args.copies / figures[name]["wall_s"], 1)
        print(json.dumps(figures, indent=2))
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(figures, indent=2))
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
