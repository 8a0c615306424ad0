"""course.memory.AllocationRecorder counts new memory, and only new memory.

The grader reads ``materialized-jacobian`` (and later ``saved-quadratic-tensor``) from it,
so both directions matter: an N×N tensor built by any route is seen, and views, inputs
and in-place results — which cost nothing — are never counted.
"""

import sys

import pytest
import torch

from course import witness
from course.memory import Allocation, AllocationRecorder, RecordedCalls, record_allocations, tensors_in
from course.peak_memory import PeakMemory

F64 = torch.float64
N = 64


@pytest.fixture
def y():
    return torch.softmax(torch.randn(3, N, generator=torch.Generator().manual_seed(0), dtype=F64), -1)  # (3, N)


def recorded(fn, *args):
    return record_allocations(fn, *args)[1]


# ---------------------------------------------------------------------------
# Not allocations


@pytest.mark.parametrize(
    "view",
    [
        lambda t: t,  # the input handed back
        lambda t: t.view(-1),
        lambda t: t.reshape(3, 2, N // 2),  # reshape of a contiguous tensor is a view
        lambda t: t.unsqueeze(-1),
        lambda t: t.mT,
        lambda t: t.transpose(0, 1),
        lambda t: t[:, 1:5],
        lambda t: t.detach(),
        lambda t: t[:, :1].expand(3, N),  # a column broadcast along the row: N elements, not N²
        lambda t: t[0, :, None].expand(N, N),  # (N, 1) expanded to (N, N): still only N stored
        lambda t: t.diagonal(),
        lambda t: t.unbind(0),
        lambda t: t.split(16, dim=-1),
    ],
    ids=["identity", "view", "reshape", "unsqueeze", "mT", "transpose", "slice", "detach", "expand-row",
         "expand-N1-to-NN", "diagonal", "unbind", "split"],
)
def test_views_and_inputs_are_not_allocations(view, y):
    rec = recorded(view, y)
    assert rec.allocations == [] and rec.largest_numel == 0 and rec.largest is None
    assert rec.offenders(1) == []


def test_in_place_and_out_results_are_not_allocations(y):
    def in_place(t, buf):
        t.mul_(2).add_(1)
        torch.mul(t, 3, out=buf)  # buf already has the right size

    rec = recorded(in_place, y.clone(), torch.empty_like(y))
    assert rec.allocations == []
    assert rec.ops["aten.mul_"] == 1 and rec.ops["aten.add_"] == 1


# ---------------------------------------------------------------------------
# Allocations


def test_a_dense_jacobian_is_seen_whichever_op_builds_it(y):
    def dense(y):
        return torch.diag_embed(y) - y[..., :, None] * y[..., None, :]  # (3, N, N) three times

    rec = recorded(dense, y)
    assert rec.offenders(N * N) == [("aten.diag_embed", (3, N, N)), ("aten.mul", (3, N, N)), ("aten.sub", (3, N, N))]
    assert rec.largest_numel == 3 * N * N
    assert rec.largest == Allocation("aten.diag_embed", (3, N, N), 3 * N * N, 3 * N * N * 8, F64, False)
    assert "aten.diag_embed 3×64×64 (12,288 elements)" in rec.summary()


def test_an_honest_softmax_backward_allocates_only_row_sized_tensors(y):
    dy = torch.randn_like(y)
    rec = recorded(lambda y, dy: y * (dy - (y * dy).sum(-1, keepdim=True)), y, dy)
    assert [a.shape for a in rec.allocations] == [(3, N), (3, 1), (3, N), (3, N)]
    assert rec.largest_numel == 3 * N < N * N
    assert rec.total_bytes == (3 * 3 * N + 3) * 8


def test_factories_are_allocations_and_are_counted(y):
    def factories(y):
        a = torch.zeros(N, N, dtype=y.dtype)
        b = torch.eye(N)
        c = torch.arange(N)
        d = torch.tensor([1.0, 2.0])  # built outside the dispatcher, then lifted
        e = torch.empty_like(y)  # made from a tensor's shape: new memory, not a factory
        return a, b, c, d, e

    rec = recorded(factories, y)
    assert [(a.op, a.shape, a.factory) for a in rec.allocations] == [
        ("aten.zeros", (N, N), True), ("aten.eye", (N, N), True), ("aten.arange", (N,), True),
        ("aten.lift_fresh", (2,), True), ("aten.empty_like", (3, N), False),
    ]
    assert rec.factory_calls == 4


def test_a_copying_reshape_counts_once(y):
    rec = recorded(lambda t: t.mT.reshape(-1), y)  # aten: clone, then _unsafe_view of the clone
    assert [(a.op, a.shape) for a in rec.allocations] == [("aten.clone", (N, 3))]


def test_temporaries_freed_in_a_loop_are_each_counted(y):
    """The allocator reuses freed memory at the same address; each temporary is still a new allocation."""

    def per_row(y):
        for row in y:
            J = torch.outer(row, row)  # freed at the next iteration
            del J

    rec = recorded(per_row, y)
    assert [shape for _, shape in rec.offenders(N * N)] == [(N, N)] * 3


def test_an_output_with_a_small_storage_counts_its_storage():
    rec = recorded(lambda: torch.empty_strided((N, N), (0, 1)))  # N stored, N² viewed
    assert rec.largest_numel == N
    assert rec.allocations[0].shape == (N, N)


def test_several_outputs_are_each_recorded(y):
    rec = recorded(lambda t: t.max(dim=-1), y)  # values and indices
    assert [(a.shape, a.dtype) for a in rec.allocations] == [((3,), F64), ((3,), torch.int64)]


def test_ignored_tensors_never_count():
    t = torch.ones(4)
    with AllocationRecorder(ignore=[t]) as rec:
        torch.ops.aten.alias(t)  # a view anyway
        u = t + 1
    assert [a.op for a in rec.allocations] == ["aten.add"]
    assert u.shape == (4,)


# ---------------------------------------------------------------------------
# As a context manager


def test_the_recorder_stops_at_the_end_of_its_block_even_on_an_error():
    with pytest.raises(ValueError):
        with AllocationRecorder() as rec:
            torch.ones(3)
            raise ValueError("student code failed")
    torch.ones(5)  # outside: not seen
    assert [a.shape for a in rec.allocations] == [(3,)]


def test_recorders_nest_and_each_sees_its_own_block():
    with AllocationRecorder() as outer:
        torch.ones(2)
        with AllocationRecorder() as inner:
            torch.ones(3)
    assert [a.shape for a in inner.allocations] == [(3,)]
    assert [a.shape for a in outer.allocations] == [(2,), (3,)]


def test_record_allocations_returns_the_result_too(y):
    out, rec = record_allocations(torch.softmax, y, -1)
    assert torch.equal(out, torch.softmax(y, -1)) and rec.allocations[0].shape == (3, N)


def test_using_the_recorder_does_not_pull_in_dynamo():
    """TorchDispatchMode wraps its hook in a dynamo 'disable' by default, which imports torch._dynamo (seconds)."""
    if "torch._dynamo" in sys.modules:
        pytest.skip("another test already imported torch._dynamo")
    with AllocationRecorder():
        torch.ones(2) * 2
    assert "torch._dynamo" not in sys.modules


# ---------------------------------------------------------------------------
# One mechanism for the recorder and PeakMemory


@pytest.mark.parametrize("probe", [AllocationRecorder, PeakMemory], ids=["recorder", "peak"])
def test_an_out_buffer_that_must_grow_is_new_memory(probe, y):
    """Its storage object stays the same, but its memory moves: hiding an N×N product in one must not work."""
    buf = torch.empty(0, dtype=F64)
    with probe(ignore=(y, buf)) as mem:
        torch.outer(y[0], y[0], out=buf)  # (N, N) into an empty buffer
    assert mem.peak == N * N * 8
    if probe is AllocationRecorder:
        assert [a.shape for a in mem.allocations] == [(N, N)]


@pytest.mark.parametrize("probe", [AllocationRecorder, PeakMemory], ids=["recorder", "peak"])
def test_a_tensor_pointed_at_existing_memory_is_no_allocation(probe, y):
    """Triton's interpreter does this with every kernel argument: an empty tensor, set_ to the argument's storage."""
    with probe(ignore=y) as mem:
        alias = y.new_empty(0).set_(y.untyped_storage(), 0, y.shape, y.stride())
    assert mem.peak == 0 and alias.data_ptr() == y.data_ptr()
    if probe is AllocationRecorder:
        assert [(a.op, a.numel) for a in mem.allocations] == [("aten.new_empty", 0)]


def test_the_recorder_knows_what_is_live_and_its_peak_as_peak_memory_does(y):
    with AllocationRecorder() as rec:
        t = y * 2
        del t
        kept = y + 1
    assert (rec.live, rec.peak) == (3 * N * 8, 3 * N * 8)
    assert [a.op for a in rec.allocations] == ["aten.mul", "aten.add"], "every allocation stays listed, freed or not"
    del kept


def test_tensors_in_walks_lists_tuples_and_dicts_as_deep_as_asked(y):
    nested = {"a": (y, [y, {"b": [y]}]), "c": 3}
    assert len(list(tensors_in(nested))) == 3
    assert len(list(tensors_in(nested, 2))) == 1 and len(list(tensors_in(nested, 3))) == 2
    assert list(tensors_in(y, 0)) == [y]


def test_recorded_calls_keep_each_calls_arguments_and_recorder(y):
    recorded = RecordedCalls()
    double = recorded(lambda t: t * 2)
    double(y)
    double(y[:1])
    assert [(args[0].shape, [a.shape for a in rec.allocations]) for args, rec in recorded.calls] == [
        ((3, N), [(3, N)]), ((1, N), [(1, N)])]


# ---------------------------------------------------------------------------
# What the operating system counted, where another process ran the call (course.witness)


def test_a_count_of_touched_memory_is_read_on_large_cases_only():
    big = 4099 * 4099  # elements of an N×N tensor of float64 at N = 4,099: 134 MB
    rec = AllocationRecorder()
    with rec:
        witness.report(witness.Measurement(itemsize=8, touched=80 << 20))  # 80 MiB: over half of 134 MB
    assert rec.allocations == [] and [a.op for a in rec.touched] == [witness.TOUCHED]
    assert witness.touched_over(rec.touched, big, 8) == rec.touched
    assert witness.touched_over(rec.touched, 300 * 300, 8) == []  # too small a case for the count to tell
    quiet = AllocationRecorder()
    with quiet:
        witness.report(witness.Measurement(itemsize=8, touched=24 << 20))  # an honest call's, with the worker's own
    assert witness.touched_over(quiet.touched, big, 8) == []


def test_recorded_calls_ask_for_the_count_on_the_cases_they_are_told():
    seen = []
    recorded = RecordedCalls(counted=lambda args: args[0].numel() > 3)
    fn = recorded(lambda x: seen.append(witness.counting_pages()) or x + 1)
    fn(torch.zeros(2))
    fn(torch.zeros(5))
    assert seen == [False, True] and not witness.counting_pages()
