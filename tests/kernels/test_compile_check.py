"""kernels.compile_check: it fails kernels sized to spill, to overflow shared memory or int32 offsets,
or not to compile, and it reports a row for every kernel, configuration and target of the quick grid.

Every check runs in a fresh process with TRITON_INTERPRET=0, as ``make compile-check`` runs it: the other
kernel tests import ``course``, which turns on Triton's CPU interpreter for the rest of their process, and
without a GPU ``import kernels`` turns it on too unless TRITON_INTERPRET says otherwise.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from autograder.nbgrader_cli import ROOT


def compiler_env(tmp_path, interpret="0"):
    """This process's environment with TRITON_INTERPRET set to ``interpret`` (None: unset) and a cache of the test's own."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret is not None:
        env["TRITON_INTERPRET"] = interpret
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    return env


def run(args, tmp_path, timeout=600, interpret="0"):
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=compiler_env(tmp_path, interpret),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def toy_rows(tmp_path_factory):
    """The rows of tests/kernels/oversized_kernels.py: {(op, dtype, target): [rows]}."""
    done = run(["-m", "tests.kernels.oversized_kernels"], tmp_path_factory.mktemp("toys"))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {}
    for row in json.loads(done.stdout):
        rows.setdefault((row["op"], row["dtype"], row["target"]), []).append(row)
    return rows


def only(rows, key):
    assert key in rows, f"no row for {key}; rows for {sorted(rows)}"
    assert len(rows[key]) == 1, rows[key]
    return rows[key][0]


@pytest.mark.parametrize("target", ["sm_75", "sm_86", "sm_89", "sm_80", "sm_90", "gfx942"])
def test_a_kernel_that_fits_passes_with_its_resources(toy_rows, target):
    row = only(toy_rows, ("small_row", "fp32", target))
    assert row["status"] == "ok" and row["notes"] == [], row
    assert row["registers"] > 0 and row["spill"] == 0 and row["warps"] == 1 and row["blocks_per_sm"] >= 1, row


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "gfx942"])
def test_a_row_too_long_for_one_warp_spills_and_fails(toy_rows, target):
    row = only(toy_rows, ("long_row", "fp32", target))
    assert row["status"] == "FAIL" and row["spill"] > 0, row
    assert any(note.startswith("spills") for note in row["notes"]), row


def test_a_spill_in_float64_is_allowed(toy_rows):
    row = only(toy_rows, ("long_row", "fp64", "sm_80"))
    assert row["spill"] > 0 and row["status"] == "ok", row
    assert row["notes"] == [f"spills {row['spill']} B (allowed in fp64)"], row


@pytest.mark.parametrize("dtype, target, limit", [
    ("fp32", "sm_80", 166912),  # 163 KB per block on an A100
    ("fp32", "sm_86", 101376),  # 99 KB on an RTX 3090 or A10
    ("fp32", "gfx942", 65536),  # 64 KB of LDS on an MI300X
    ("fp64", "sm_80", 166912),  # float64 may spill, but must still fit shared memory
])
def test_tiles_over_the_shared_memory_limit_fail(toy_rows, dtype, target, limit):
    row = only(toy_rows, ("big_tiles", dtype, target))
    assert row["status"] == "FAIL" and row["shared"] > limit, row
    assert f"shared memory {row['shared']} B > {limit} B per block" in row["notes"], row
    assert row["blocks_per_sm"] == 0, row


@pytest.mark.parametrize("target", ["sm_75", "sm_89", "sm_90", "gfx942"])
def test_tiles_within_the_limit_pass(toy_rows, target):
    row = only(toy_rows, ("small_tiles", "fp32", target))
    assert row["status"] == "ok" and 0 < row["shared"] <= 65536, row


def test_a_kernel_that_does_not_compile_fails_with_the_compilers_reason(toy_rows):
    row = only(toy_rows, ("mixed_tiles", "fp32", "sm_80"))
    assert row["status"] == "FAIL" and row["registers"] is None, row
    assert row["notes"] == ["does not compile: CompilationError: Both operands must be same dtype. Got fp32 and fp16"], row


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_int32_offsets_past_2_to_the_31_fail_and_int64_ones_pass(toy_rows, target):
    narrow = only(toy_rows, ("narrow_offsets", "fp32", target))
    assert narrow["status"] == "FAIL", narrow
    assert narrow["notes"] == ["X_ptr reaches offset 4,587,519,999 in int32"], narrow  # 70000 × 65536 − 1
    wide = only(toy_rows, ("wide_offsets", "fp32", target))
    assert wide["status"] == "ok" and wide["notes"] == [], wide


def test_an_autotuned_kernel_compiles_every_config_its_pruning_keeps(toy_rows):
    rows = toy_rows[("tuned", "fp32", "sm_90")]  # 2048 elements: the 4096 block is pruned
    assert sorted((r["blocks"], r["warps"], r["grid"][0]) for r in rows) == [("1024", 4, 2), ("256", 2, 8)], rows
    assert all(r["status"] == "ok" for r in rows), rows


def test_host_code_that_raises_fails(toy_rows):
    row = only(toy_rows, ("refused", "fp32", "sm_90"))
    assert (row["kernel"], row["status"]) == ("(host code)", "FAIL"), row
    assert row["notes"] == ["host code raised ValueError: rows longer than this kernel holds"], row


def test_a_kernel_the_host_code_never_launches_fails(toy_rows):
    rows = {row["kernel"]: row for row in toy_rows[("half_launched", "fp32", "sm_90")]}
    assert rows["row_in_registers"]["status"] == "ok", rows
    assert rows["never_launched"]["status"] == "FAIL", rows
    assert rows["never_launched"]["notes"] == ["the host code did not launch it"], rows


def test_a_passing_subset_exits_0_and_prints_a_row_per_kernel(tmp_path):
    done = run(["-m", "kernels.compile_check", "--op", "embedding", "--target", "sm_90", "--dtype", "fp32"], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["status", "target", "op", "kernel"], lines[0]
    kernels = sorted(line.split()[3] for line in lines[1:] if line.startswith("ok "))
    assert kernels == ["_gather_rows_kernel", "_scatter_add_kernel"], done.stdout
    assert "2 rows, 2 ok, 0 FAIL" in done.stdout


def test_markdown_output_is_a_table(tmp_path):
    done = run(["-m", "kernels.compile_check", "--op", "embedding", "--target", "gfx942", "--dtype", "bf16", "--markdown"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("| status | target | op | kernel |") and set(lines[1]) <= {"|", "-"}, lines[:2]
    assert len(lines) == 4 and all(line.startswith("| ok | gfx942 | embedding |") for line in lines[2:]), lines
    assert "2 rows, 2 ok, 0 FAIL" in done.stderr


@pytest.mark.parametrize("args, message", [
    (["--op", "nope"], "argument --op: invalid choice: 'nope'"),
    (["--target", "sm_70"], "argument --target: invalid choice: 'sm_70'"),
    (["--dtype", "fp8"], "argument --dtype: invalid choice: 'fp8'"),
    (["--jobs", "0"], "argument --jobs: '0' is not a positive number of processes"),
    (["--json", "--markdown"], "not allowed with argument"),
])
def test_bad_arguments_get_clear_messages(tmp_path, args, message):
    done = run(["-m", "kernels.compile_check", *args], tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr


@pytest.mark.parametrize("interpret", ["1", "true"])  # any value Triton reads as true
def test_refuses_to_run_in_the_interpreter(tmp_path, interpret):
    done = subprocess.run([sys.executable, "-m", "kernels.compile_check", "--op", "embedding"], cwd=ROOT,
                          env=compiler_env(tmp_path, interpret), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"TRITON_INTERPRET={interpret} was set" in done.stderr and "run it with TRITON_INTERPRET unset or 0" in done.stderr, done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA, `import course` leaves the compiler on")
def test_refuses_after_course_turned_the_interpreter_on(tmp_path):
    code = "import course, sys; from kernels.compile_check import main; sys.exit(main(['--op', 'embedding']))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=compiler_env(tmp_path, None),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "has not imported course" in done.stderr, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU, where `import kernels` interprets")
def test_without_triton_interpret_it_compiles_all_the_same(tmp_path):
    """`import kernels` switched the interpreter on before the check ran, so it compiles in a process of its own."""
    done = run(["-m", "kernels.compile_check", "--op", "embedding", "--target", "sm_90", "--dtype", "fp32"], tmp_path,
               interpret=None)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 rows, 2 ok, 0 FAIL" in done.stdout, done.stdout


def test_the_quick_grid_gives_the_students_gpus_their_cells_and_a_named_target_every_cell():
    from kernels.compile_check import MAIN_TARGETS, OPS, STUDENT_TARGETS, grid

    quick = grid(full=False)
    on_students = {(c.op.name, c.shape, c.dtype) for c in quick if set(STUDENT_TARGETS) <= set(c.targets)}
    assert on_students == {(op.name, shape, dtype) for op in OPS.values() for shape, dtype in op.student_quick}
    assert all(set(c.targets) in (set(MAIN_TARGETS), set(STUDENT_TARGETS), set(MAIN_TARGETS) | set(STUDENT_TARGETS))
               for c in quick), quick
    assert all(not op.name[0].isdigit() for op in OPS.values() if op.student_quick)  # the notebooks': full grid only
    main_cells = {(c.op.name, c.shape, c.dtype) for c in quick if set(MAIN_TARGETS) <= set(c.targets)}
    named = grid(full=False, targets=["sm_75"])
    assert {(c.op.name, c.shape, c.dtype) for c in named} == main_cells and all(c.targets == ("sm_75",) for c in named)


def test_the_quick_grid_reports_every_kernel_config_and_target(tmp_path):
    from kernels.compile_check import GPUS, grid

    done = run(["-m", "kernels.compile_check", "--json"], tmp_path, timeout=900)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    rows = json.loads(done.stdout)
    reported = {(r["target"], r["op"], r["kernel"], r["config"], r["dtype"]) for r in rows}
    cases = grid(full=False)
    expected = {(gpu, case.op.name, kernel, case.config, case.dtype)
                for case in cases for gpu in case.targets for kernel in case.op.kernels}
    assert expected <= reported, f"no row for {sorted(expected - reported)[:10]}"
    for row in rows:
        assert row["status"] in ("ok", "FAIL"), row
        if row["registers"] is not None:
            assert row["warps"] >= 1 and row["stages"] >= 1 and row["shared"] >= 0 and row["blocks_per_sm"] >= 0, row
    # The host code asked the target, not torch.cuda, how many programs fill it: 4 per SM (CU).
    for row in rows:
        if row["kernel"] == "_norm_bwd_kernel":
            assert row["grid"] == [4 * GPUS[row["target"]].multiprocessor_count], row
    # Every kernel here and in the notebooks compiles for every target with no spill (fp64 aside) and fits.
    failing = [(r["target"], r["op"], r["kernel"], r["config"], r["dtype"], r["notes"]) for r in rows
               if r["status"] == "FAIL"]
    assert not failing, failing
    assert done.returncode == 0, done.stderr[-3000:]
