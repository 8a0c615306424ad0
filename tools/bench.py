"""make bench: every kernel benchmark, and what a CPU can measure honestly, written to bench/.

1. ``python -m kernels.bench <op>`` for softmax, cross_entropy, layer_norm, rms_norm and
   attention. On a GPU each one's table is saved as ``bench/kernels_<op>.txt``; without CUDA
   each says so, and nothing is written for it.
2. Attention memory against T, on the CPU: the extra peak memory of one forward+backward of a
   plain PyTorch attention that saves P and of ``kernels.attention`` (recompute), for
   T = 256 … 4096 (``kernels.memory_scaling``). Writes ``bench/attention_memory.{md,csv,png}``
   and checks that recompute grows linearly and needs at least 20× less than saving P at the
   largest T; exits 1 when it does not.
3. The interpreter run time of each notebook's hidden tests: ``source/NN_slug/NN_slug.ipynb``
   run top to bottom in a fresh kernel (nbclient, as nbgrader's autograde runs it) with each
   hidden test block split into a cell of its own, so the kernel's per-cell timing is that
   block's time. Writes ``bench/hidden_tests.{md,csv,png}``, with the whole notebook's time too.

Parts 2 and 3 run in child processes with ``TRITON_INTERPRET=1`` (the CPU, even on a GPU
machine) and one torch thread, as grading does. Every file says when and where it was measured.
The memory part writes nothing when a check fails; the hidden-test table marks each test that
did not pass on the source solutions and leaves out a notebook that could not run.

Usage: python -m tools.bench [--only kernels memory hidden] [--seq-lens 256 512 ...] [--out bench]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.nbgrader_cli import ROOT, assignments

OPS = ("softmax", "cross_entropy", "layer_norm", "rms_norm", "attention")
SEQ_LENS = (256, 512, 1024, 2048, 4096)
MIN_RATIO = 20  # recompute must need at least this many times less than saved P at the largest T
MAX_SLOPE = 1.1  # log-log slope of recompute's bytes against T: linear is 1
MiB = 2**20
WHOLE = "(the whole notebook)"


# -- 1. the GPU benchmarks ------------------------------------------------------------


def kernel_benchmarks(out: Path) -> bool:
    ok = True
    for op in OPS:
        print(f"$ python -m kernels.bench {op}", flush=True)
        lines = []
        with subprocess.Popen([sys.executable, "-m", "kernels.bench", op], cwd=ROOT, stdout=subprocess.PIPE, text=True) as bench:
            for line in bench.stdout:  # a GPU sweep takes minutes: show each row as it comes
                sys.stdout.write(line)
                sys.stdout.flush()
                lines.append(line)
        output = "".join(lines)
        if bench.returncode != 0:
            print(f"kernels.bench {op} failed with exit code {bench.returncode}")
            ok = False
        elif "no CUDA device" not in output:
            path = out / f"kernels_{op}.txt"
            path.write_text(f"{_stamp()}\n$ python -m kernels.bench {op}\n{output}")
            print(f"wrote {_rel(path)}")
    return ok


# -- 2. attention memory against T ----------------------------------------------------


def _memory_child(seq_lens: list[int], tile: int, result: Path) -> None:
    import course  # noqa: F401 — the interpreter, before any kernel is defined
    from kernels.memory_scaling import loglog_slope, measure

    def progress(row):
        print(f"  T = {row['T']:5d}: saved P {row['saved_p'] / MiB:9.2f} MiB, recompute {row['recompute'] / MiB:7.3f} MiB "
              f"({time.perf_counter() - start:.1f} s so far)", flush=True)

    start = time.perf_counter()
    rows = measure(seq_lens, tile=tile, progress=progress)
    ts = [r["T"] for r in rows]
    slopes = {name: loglog_slope(ts, [r[name] for r in rows]) if len(rows) > 1 else None for name in ("saved_p", "recompute")}
    result.write_text(json.dumps({"rows": rows, "slopes": slopes, "seconds": time.perf_counter() - start}))


def attention_memory(out: Path, seq_lens: list[int], tile: int) -> bool:
    print(f"attention memory vs T on the CPU (Triton interpreter, tiles {tile}×{tile}), T = {seq_lens}", flush=True)
    got = _child(["--child-memory", "--seq-lens", *map(str, seq_lens), "--tile", str(tile)])
    if got is None:
        return False
    rows = got["rows"]
    slope_p, slope_r = (float("nan") if got["slopes"][n] is None else got["slopes"][n] for n in ("saved_p", "recompute"))
    last = rows[-1]
    ratio = last["saved_p"] / last["recompute"]
    worst = max(r["max_rel_err"] for r in rows)
    checks = [
        (f"recompute grows linearly: log-log slope {slope_r:.3f} ≤ {MAX_SLOPE}", len(rows) < 2 or slope_r <= MAX_SLOPE),
        (f"recompute needs {ratio:.1f}× less than saved P at T = {last['T']} (at least {MIN_RATIO}×)", ratio >= MIN_RATIO),
        (f"both give the same output and gradients: largest relative error {worst:.1e} < 1e-4", worst < 1e-4),
    ]
    r0 = rows[0]
    table = [
        "# Attention forward+backward: extra peak memory against T\n",
        f"{_stamp()}. CPU, Triton interpreter, {r0['dtype']}, B = {r0['B']}, H = {r0['H']}, D = {r0['D']}; "
        f"counted by `kernels.memory_scaling` (live tensor bytes, `course.peak_memory.PeakMemory`); "
        f"recompute run on {tile}×{tile} tiles (the count does not depend on the tile size). "
        f"Measured in {got['seconds']:.0f} s.\n",
        "| T | saved P (MiB) | recompute (MiB) | saved P / recompute | max rel. error |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        table.append(f"| {r['T']} | {r['saved_p'] / MiB:.2f} | {r['recompute'] / MiB:.3f} | "
                     f"{r['saved_p'] / r['recompute']:.1f} | {r['max_rel_err']:.1e} |")
    table.append(f"\nlog-log slope against T: saved P {slope_p:.2f}, recompute {slope_r:.2f}.\n")
    table += [f"- {'✓' if ok else '✗'} {text}" for text, ok in checks]
    text = "\n".join(table) + "\n"
    print(text)
    if not all(ok for _, ok in checks):
        print("attention memory: a check failed; nothing written")
        return False
    (out / "attention_memory.md").write_text(text)
    _write_csv(out / "attention_memory.csv", rows)
    _plot_memory(out / "attention_memory.png", rows, tile)
    for name in ("attention_memory.md", "attention_memory.csv", "attention_memory.png"):
        print(f"wrote {_rel(out / name)}")
    return True


def _plot_memory(path: Path, rows: list[dict], tile: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ts = [r["T"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ax.loglog(ts, [r["saved_p"] / MiB for r in rows], "o-", label="saves P (PyTorch autograd)")
    ax.loglog(ts, [r["recompute"] / MiB for r in rows], "s-", label="recompute (kernels.attention)")
    for r in (rows[-1],):
        ax.annotate(f"{r['saved_p'] / r['recompute']:.0f}× less", (r["T"], r["recompute"] / MiB),
                    textcoords="offset points", xytext=(-60, 12))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ts, [str(t) for t in ts])
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("extra peak memory of forward+backward (MiB)")
    r0 = rows[0]
    ax.set_title(f"Attention memory, measured on the CPU\n{r0['dtype']}, B = {r0['B']}, H = {r0['H']}, D = {r0['D']}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- 3. hidden-test run times -------------------------------------------------------


HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS\n?", re.S)


def split_hidden(nb):
    """A copy of a source notebook in which each hidden test block is a code cell of its own.

    The visible part of a test cell stays where it was, the hidden block follows it as a
    cell whose metadata names its test cell (``bench_hidden``), so a kernel's per-cell timing
    is the hidden tests' time alone.
    """
    import nbformat

    out = nbformat.v4.new_notebook(metadata=nb.metadata)
    for cell in nb.cells:
        found = HIDDEN.search(cell.source) if cell.cell_type == "code" else None
        if not found:
            out.cells.append(cell)
            continue
        before, after = cell.source[: found.start()].rstrip(), cell.source[found.end():].strip()
        if before:
            out.cells.append(nbformat.v4.new_code_cell(before, metadata=cell.metadata))
        hidden = nbformat.v4.new_code_cell(found.group(1))
        hidden.metadata["bench_hidden"] = cell.metadata["nbgrader"]["grade_id"]
        out.cells.append(hidden)
        if after:
            out.cells.append(nbformat.v4.new_code_cell(after))
    return out


def _seconds(cell) -> float:
    timing = cell.metadata["execution"]
    began = datetime.datetime.fromisoformat(timing["iopub.execute_input"])
    return (datetime.datetime.fromisoformat(timing["shell.execute_reply"]) - began).total_seconds()


def _hidden_child(slug: str, result: Path) -> None:
    """Run source/<slug> top to bottom in a fresh kernel, as nbgrader does; time each hidden block."""
    import nbformat
    from nbclient import NotebookClient

    nb = split_hidden(nbformat.read(ROOT / "source" / slug / f"{slug}.ipynb", as_version=4))
    with tempfile.TemporaryDirectory() as tmp:
        client = NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True, record_timing=True,
                                extra_arguments=["--HistoryManager.hist_file=:memory:"],
                                resources={"metadata": {"path": tmp}})
        start = time.perf_counter()
        client.execute()
        total = time.perf_counter() - start
    rows = []
    for cell in nb.cells:
        if "bench_hidden" not in cell.metadata:
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if not errors:
            status = "pass"
        else:
            first = (errors[0].evalue or errors[0].ename).splitlines()[0]
            status = ("fail: " if errors[0].ename == "GradingFailure" else f"error: {errors[0].ename}: ") + first
        rows.append({"assignment": slug, "check": cell.metadata["bench_hidden"], "seconds": _seconds(cell), "status": status})
        print(f"  {slug} {rows[-1]['check']:<38} {rows[-1]['seconds']:7.2f} s  {status}", flush=True)
    rows.append({"assignment": slug, "check": WHOLE, "seconds": total, "status": "ran"})
    print(f"  {slug} {WHOLE:<38} {total:7.2f} s", flush=True)
    result.write_text(json.dumps(rows))


def hidden_test_times(out: Path, slugs: list[str]) -> bool:
    print("hidden-test run time per notebook on the CPU (Triton interpreter, one torch thread)", flush=True)
    rows, ok = [], True
    for slug in slugs:
        got = _child(["--child-hidden", slug])
        if got is None:
            ok = False
            continue
        rows += got
    if not rows:
        return False
    checks = [r for r in rows if r["check"] != WHOLE]
    failed = [r for r in checks if r["status"] != "pass"]
    lines = [
        "# Hidden tests: interpreter run time per notebook\n",
        f"{_stamp()}. Each source notebook run top to bottom in a fresh kernel (nbclient, as nbgrader "
        "runs it) with TRITON_INTERPRET=1 and one torch thread; each hidden test block is a cell of its "
        "own, timed by the kernel.\n",
        "| notebook | hidden tests | hidden tests (s) | slowest | whole notebook (s) |",
        "|---|---:|---:|---|---:|",
    ]
    for slug in dict.fromkeys(r["assignment"] for r in checks):
        mine = [r for r in checks if r["assignment"] == slug]
        slowest = max(mine, key=lambda r: r["seconds"])
        whole = next(r["seconds"] for r in rows if r["assignment"] == slug and r["check"] == WHOLE)
        lines.append(f"| {slug} | {len(mine)} | {sum(r['seconds'] for r in mine):.1f} | "
                     f"{slowest['check']} ({slowest['seconds']:.1f} s) | {whole:.0f} |")
    lines += ["", "| notebook | test cell | seconds | result |", "|---|---|---:|---|"]
    lines += [f"| {r['assignment']} | {r['check']} | {r['seconds']:.2f} | {r['status']} |" for r in checks]
    if failed:
        lines.append(f"\n{len(failed)} hidden test(s) did not pass on the source solutions; their times are "
                     "not a grading time.")
    text = "\n".join(lines) + "\n"
    print(text)
    (out / "hidden_tests.md").write_text(text)
    _write_csv(out / "hidden_tests.csv", rows)
    _plot_hidden(out / "hidden_tests.png", checks)
    for name in ("hidden_tests.md", "hidden_tests.csv", "hidden_tests.png"):
        print(f"wrote {_rel(out / name)}")
    return ok and not failed


def _plot_hidden(path: Path, checks: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    slugs = list(dict.fromkeys(r["assignment"] for r in checks))
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * len(slugs) + 1.6))
    for y, slug in enumerate(slugs):
        left = 0.0
        for r in (r for r in checks if r["assignment"] == slug):
            colour = "tab:blue" if r["status"] == "pass" else "tab:red"
            ax.barh(y, r["seconds"], left=left, color=colour, edgecolor="white", height=0.6)
            left += r["seconds"]
        ax.text(left, y, f" {left:.1f} s", va="center", fontsize=9)
    ax.set_yticks(range(len(slugs)), slugs)
    ax.invert_yaxis()
    ax.set_xlabel("seconds (one segment per hidden test cell; red: did not pass)")
    ax.set_title("Hidden tests on the CPU, Triton interpreter, one torch thread", fontsize=10)
    ax.margins(x=0.15)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- shared -----------------------------------------------------------------------------


def _child(args: list[str]) -> dict | list | None:
    """Run this script in a child on the CPU interpreter; return what it wrote, or None when it failed."""
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg")
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        done = subprocess.run([sys.executable, "-m", "tools.bench", *args, "--result", str(result)], cwd=ROOT, env=env)
        if done.returncode != 0 or not result.exists():
            print(f"{' '.join(args)}: the child process failed (exit code {done.returncode})")
            return None
        return json.loads(result.read_text())


def _write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _stamp() -> str:
    import torch
    import triton

    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    cpu = platform.processor() or platform.machine()
    return f"Measured {when} on {platform.node()} ({cpu}, {os.cpu_count()} CPUs), torch {torch.__version__}, triton {triton.__version__}"


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=["kernels", "memory", "hidden"], default=["kernels", "memory", "hidden"])
    parser.add_argument("--seq-lens", type=int, nargs="+", default=list(SEQ_LENS), help="T for the memory measurement")
    parser.add_argument("--tile", type=int, default=256, help="interpreter tile for the recompute kernels")
    parser.add_argument("--assignments", nargs="+", default=None, help="notebooks for the hidden-test times (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench")
    parser.add_argument("--child-memory", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-hidden", metavar="SLUG", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child_memory:
        _memory_child(args.seq_lens, args.tile, args.result)
        return 0
    if args.child_hidden:
        _hidden_child(args.child_hidden, args.result)
        return 0

    args.out.mkdir(parents=True, exist_ok=True)
    ok, timings = True, {}
    for part, run in (
        ("kernels", lambda: kernel_benchmarks(args.out)),
        ("memory", lambda: attention_memory(args.out, args.seq_lens, args.tile)),
        ("hidden", lambda: hidden_test_times(args.out, args.assignments or assignments())),
    ):
        if part in args.only:
            start = time.perf_counter()
            ok &= run()
            timings[part] = time.perf_counter() - start
    print("bench: " + ", ".join(f"{part} {s:.0f} s" for part, s in timings.items()) + ("" if ok else " — something failed, see above"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
