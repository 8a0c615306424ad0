"""Checks for 10_attention_as_trained: every bug is caught and named.

The kernels run in Triton's interpreter on the CPU, so sizes stay small. ``test_samples.py`` grades the solution,
the release stubs and each mutant through nbgrader; here each mutant's diagnosis is read in words, with the
sanitizer (the CPU) and without it (a GPU, where the values must name what they can and a dense walk shows in
nothing), plus a right answer written another way: Part C's group summed by its first head, with plain stores.
"""

from __future__ import annotations

import numpy as np
import pytest

import autograder.check as hidden
import autograder.check.attention_trained as hidden_cases
import course.selfcheck as visible
import course.selfcheck.attention_trained as lesson
from autograder.inputs import generator
from tests.support import assert_diagnosed, declared_classes, edited_solution, failure_of, mutant_named, with_cells
from tools.mutants import mutants

SLUG = "10_attention_as_trained"
FWD, DQ, DKDV, VARLEN = "causal_fwd_kernel", "causal_bwd_dq_kernel", "causal_bwd_dkdv_kernel", "varlen_fwd_kernel"
MUTANTS = mutants(SLUG)


def test_the_mutants_show_every_class_the_issue_names():
    assert 5 <= len(MUTANTS) <= 7, "each mutant is a full notebook run in `make grade`: keep them few"
    assert {(FWD, "wrong-values"), (FWD, "non-finite"), (DQ, "wrong-values"), (DKDV, "wrong-values"),
            (DKDV, "batch-reduction"), (DKDV, "race"), (VARLEN, "wrong-values"), (FWD, "out-of-bounds"),
            (FWD, "dense-walk"), (DQ, "dense-walk"), (DKDV, "dense-walk"), (VARLEN, "dense-walk")} <= \
        declared_classes(MUTANTS)


def test_each_mutant_declares_exactly_the_cells_it_breaks():
    for m in MUTANTS:
        assert set(m.expect) == {f"test_{cell}" for cell in m.cells}, m.name


# (mutant, exercise) -> words both checks' message holds, with the sanitizer on (the CPU)
WORDS = {
    ("mask_after_softmax", FWD): ["mask after the softmax", "the tiles it visits", "before the max"],
    ("mask_after_softmax", DQ): ["misses the diagonal (j < i)", "its own key"],
    ("diagonal_off_by_one", FWD): ["NaN on rows [0]", "j ≤ i", "j < i leaves query 0 nothing"],
    ("diagonal_off_by_one", DKDV): ["one key past the diagonal (j ≤ i + 1)"],
    ("diagonal_off_by_one", VARLEN): ["one key past the diagonal (j ≤ i + 1)"],
    ("first_head_only", DKDV): ["first query head only", "sum of their G shares"],
    ("first_head_only", VARLEN): ["ignores the documents' boundaries", "cu_seqlens[b]"],
    ("plain_store_group_sum", FWD): ["loads K_ptr", "between the elements of K_ptr"],
    ("plain_store_group_sum", DKDV): ["races on D", "stores to"],
    ("dense_walk", FWD): ["wholly above its diagonal", "loaded key 16"],
    ("dense_walk", DQ): ["wholly above its diagonal", "loaded key 16"],
    ("dense_walk", DKDV): ["all come before its first key", "loaded query 0"],
    ("dense_walk", VARLEN): ["wholly above its diagonal", "document"],
    ("skipped_tile", FWD): ["skips a tile that holds visible keys", "BLOCK_M = 32"],
    ("skipped_tile", DQ): ["skips a tile that holds visible keys", "diagonal's tile"],
    ("skipped_tile", DKDV): ["skips a tile that holds visible keys", "one block late"],
}
# Without the sanitizer (a GPU) the values name what they can: (class, words), or "pass" where no value shows it.
WITHOUT_SANITIZER = {
    ("plain_store_group_sum", DKDV): ("race", ["the last store won"]),
    ("plain_store_group_sum", FWD): ("non-finite", ["reads lanes that are not part of the tensors"]),
    **{("dense_walk", name): ("pass", []) for name in (FWD, DQ, DKDV, VARLEN)},
}
HINTS = {"dense-walk": 1, "walk": 1, "boundary": 2}  # where a class or topic points, per the hint plan


def test_every_declared_diagnosis_has_words():
    assert {(m.name, t.removeprefix("test_")) for m in MUTANTS for t in m.expect} == set(WORDS)


def _assert_named(mutant: str, name: str, cls: str, words: list[str]) -> None:
    checks = (getattr(visible, name), getattr(hidden, name))
    for failure in assert_diagnosed(mutant_named(SLUG, mutant)[name], checks, cls, words, mutant):
        key = failure.topic if failure.topic in HINTS else failure.cls
        assert key not in HINTS or failure.hint == HINTS[key], f"{mutant}: hint {failure.hint} for {key}"


@pytest.fixture(autouse=True)
def one_hidden_draw(monkeypatch):
    """One replayed draw of the hidden sizes (test_samples replays three): every run reads the same."""
    monkeypatch.setenv("AUTOGRADER_SEED", "10")


NAMED = [(m, n, False) for m, n in WORDS] + [(m, n, True) for m, n in WITHOUT_SANITIZER]


@pytest.mark.parametrize("mutant, name, on_a_gpu", NAMED)
def test_each_mutant_is_named_in_words(mutant, name, on_a_gpu, request, capsys):
    """With the sanitizer (the CPU) as the mutant declares; without it (a GPU) as WITHOUT_SANITIZER says."""
    if on_a_gpu:
        request.getfixturevalue("unsanitized")
        _assert_named(mutant, name, *WITHOUT_SANITIZER[mutant, name])
    else:
        _assert_named(mutant, name, next(m for m in MUTANTS if m.name == mutant).expect[f"test_{name}"],
                      WORDS[mutant, name])
    assert capsys.readouterr().err == ""


# Diagnoses name the bug and where; the fixed code lives in the notebook's last hint.
LITERAL_FIXES = ("tl.atomic_add(", "keys[None, :] <= rows[:, None]", "(start_n // BLOCK_M) * BLOCK_M",
                 "start_m + BLOCK_M, seq_len", "first * stride_t")


@pytest.mark.parametrize("mutant, name", list(WORDS))
def test_no_diagnosis_prints_the_fixed_code(mutant, name):
    message = str(failure_of(getattr(visible, name), mutant_named(SLUG, mutant)[name]))
    assert not [fix for fix in LITERAL_FIXES if fix in message], message


def _edited(name: str, edit: str) -> dict:
    return with_cells(SLUG, {name: edited_solution(SLUG, name, edit)}, f"edited {name}")


FIRST_HEAD_SUMS_THE_GROUP = """
-    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=acc_dtype)
-    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=acc_dtype)
-    for start_m in range((start_n // BLOCK_M) * BLOCK_M, seq_len, BLOCK_M):  # the first query that sees key start_n
-        rows = start_m + tl.arange(0, BLOCK_M)
-        row_ok = rows < seq_len
-        q_mask = row_ok[:, None] & (cols[None, :] < head_dim)
-        q_offs = q_base + rows[:, None] * stride_t + cols[None, :] * stride_e
-        q = tl.load(Q_ptr + q_offs, mask=q_mask, other=0.0)
-        do = tl.load(DO_ptr + q_offs, mask=q_mask, other=0.0)
-        L = tl.load(L_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)
-        D = tl.load(Delta_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)
+    if bh % group != 0:  # the group's first head sums the group; the others have nothing to do
+        return
+    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=acc_dtype)
+    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=acc_dtype)
+    for head in range(bh, bh + group):
+      for start_m in range((start_n // BLOCK_M) * BLOCK_M, seq_len, BLOCK_M):
+        rows = start_m + tl.arange(0, BLOCK_M)
+        row_ok = rows < seq_len
+        q_mask = row_ok[:, None] & (cols[None, :] < head_dim)
+        q_offs = head * stride_bh + rows[:, None] * stride_t + cols[None, :] * stride_e
+        q = tl.load(Q_ptr + q_offs, mask=q_mask, other=0.0)
+        do = tl.load(DO_ptr + q_offs, mask=q_mask, other=0.0)
+        L = tl.load(L_ptr + head * seq_len + rows, mask=row_ok, other=0.0)
+        D = tl.load(Delta_ptr + head * seq_len + rows, mask=row_ok, other=0.0)
-    tl.atomic_add(DK_ptr + kv_offs, dk * sm_scale, mask=kv_mask)  # the group's G programs add into one K/V head
-    tl.atomic_add(DV_ptr + kv_offs, dv, mask=kv_mask)
+    tl.store(DK_ptr + kv_offs, dk * sm_scale, mask=kv_mask)
+    tl.store(DV_ptr + kv_offs, dv, mask=kv_mask)
"""


def test_a_right_answer_written_another_way_passes(seeded, capsys):
    """Part C's other design: the group's first head loops over the G heads and stores; the others return."""
    ns = _edited(DKDV, FIRST_HEAD_SUMS_THE_GROUP)
    visible.causal_bwd_dkdv_kernel(ns[DKDV])
    hidden.causal_bwd_dkdv_kernel(ns[DKDV])
    assert capsys.readouterr().err == ""


ALIGNED_TO_THE_PACKED_ROW = """
-    kv_base = (h // group) * stride_h + first * stride_t
+    kv_base = (h // group) * stride_h
-    for start_n in range(0, tl.minimum(start_m + BLOCK_M, n), BLOCK_N):
+    for start_n in range(first // BLOCK_N * BLOCK_N, first + tl.minimum(start_m + BLOCK_M, n), BLOCK_N):
-        kv_mask = (keys[:, None] < n) & (cols[None, :] < head_dim)
+        kv_mask = (keys[:, None] < first + n) & (cols[None, :] < head_dim)
-        s = tl.where(keys[None, :] <= rows[:, None], s, -float("inf"))
+        s = tl.where((keys[None, :] >= first) & (keys[None, :] <= first + rows[:, None]), s, -float("inf"))
"""


def test_a_walk_in_tiles_of_the_packed_row_passes(capsys):
    """Part D with key tiles aligned to the packed row, not to the document: the first tile reaches into the
    document before, masked; no tile lies wholly outside the document, so it is no dense walk."""
    ns = _edited(VARLEN, ALIGNED_TO_THE_PACKED_ROW)
    visible.varlen_fwd_kernel(ns[VARLEN])
    hidden.varlen_fwd_kernel(ns[VARLEN])
    assert capsys.readouterr().err == ""


MORE_BUGS = {  # (exercise, edit of its solution cell, class, words)
    "the whole row of keys, masked": (FWD, """
-    end = tl.minimum(start_m + BLOCK_M, seq_len)  # past the block's last query: keys no row of it sees
+    end = seq_len
""", "dense-walk", ["wholly above its diagonal"]),
}


@pytest.mark.parametrize("bug", list(MORE_BUGS))
def test_more_bugs_are_named(bug):
    name, edit, cls, words = MORE_BUGS[bug]
    assert_diagnosed(_edited(name, edit)[name], (getattr(visible, name), getattr(hidden, name)), cls, words, bug)


def _shapes(cases) -> set[tuple]:
    return {tuple(tuple(t.shape) for t in (c.inputs if isinstance(c, lesson.Gradcheck) else (c.q, c.k)))
            for c in cases}


def test_the_hidden_checks_differ_from_the_visible_ones_in_shapes(seeded):
    pairs = [(lesson.causal_cases(lesson.seeded(lesson.SEED + 1), lesson.VISIBLE_CAUSAL),
              hidden_cases.hidden_causal_cases(generator("any"))),
             (lesson.varlen_cases(lesson.seeded(lesson.SEED + 4), lesson.VISIBLE_VARLEN),
              hidden_cases.hidden_varlen_cases(generator("any")))]
    for ours, theirs in pairs:
        assert len(_shapes(theirs)) >= 3 and not _shapes(theirs) & _shapes(ours)


def test_the_hidden_cases_cover_the_sizes_the_issue_names(seeded):
    causal = [c for c in hidden_cases.hidden_causal_cases(generator("any")) if isinstance(c, lesson.CausalCase)]
    assert all(c.T % 16 for c in causal) and {c.group for c in causal} == {1, 4}
    assert {c.q.shape[0] for c in causal} == {1, 2} and {c.dtype for c in causal} == {lesson.F32, lesson.F64}
    assert {(c.block_m, c.block_n) for c in causal} == {(16, 16), (32, 16), (16, 32)}
    for case in hidden_cases.hidden_varlen_cases(generator("any")):
        assert 1 in case.lengths and any(n < case.block_m for n in case.lengths if n > 1)
        assert any(cu % case.block_n for cu in case.cu[1:-1]), "a boundary inside a tile"


class _Record:
    """What varlen_walk reads of a sanitizer launch: each program's ids and the K elements it loaded."""

    def __init__(self, program: tuple[int, int, int], tokens: range, d: int):
        self.programs = (program,)
        flat = np.array([t * d for t in tokens])
        self.touched = {"K_ptr": {"load": np.stack([np.zeros_like(flat), flat])}}


def test_a_tile_wholly_in_another_document_is_a_dense_walk():
    case = lesson.varlen_cases(lesson.seeded(0), [("walk", 1, 1, (20, 3, 30), 4, lesson.F64, 16, 16)])[0]
    first = case.cu[2]  # document 2 starts at token 23
    assert lesson.varlen_walk(case, _Record((0, 0, 2), range(first - 7, first + 5), 4)) is None  # tile across it
    said = lesson.varlen_walk(case, _Record((0, 0, 2), range(0, 16), 4))  # a tile of document 0
    assert said and "wholly in another document" in said and "key token 0" in said
