"""course.peak_memory counts live tensor bytes: new memory while it lives, nothing for views or inputs.

Notebook 05 plots its numbers for the attention backwards (one growing as T², one as T), so
both directions matter: a freed temporary must leave the total, and the peak must keep it.
"""

import gc

import torch

from course.peak_memory import PeakMemory, backward_peak, saved_bytes

F64 = torch.float64
N = 1000  # elements: 8,000 bytes in float64


def test_a_freed_temporary_counts_in_the_peak_and_leaves_the_total():
    x = torch.ones(N, dtype=F64)
    with PeakMemory() as mem:
        t = x * 2  # 8,000 bytes
        del t  # freed
        y = x + 1  # 8,000 bytes, kept
    assert mem.live == 8 * N
    assert mem.peak == 8 * N, "the temporary and y were never alive together"
    with PeakMemory() as mem:
        a, b = x * 2, x * 3  # alive together
        del a, b
    assert (mem.peak, mem.live) == (16 * N, 0)
    del y


def test_views_in_place_results_and_inputs_add_nothing():
    x = torch.ones(10, N // 10, dtype=F64)
    with PeakMemory() as mem:
        views = [x.view(-1), x.mT, x[2:5], x.reshape(N), x[:, :1].expand(10, 50), x.unsqueeze(0)]
        x.mul_(2)
        torch.add(x, 1, out=x)
    assert mem.peak == 0 and mem.live == 0
    del views


def test_reset_peak_starts_from_what_is_live():
    x = torch.ones(N, dtype=F64)
    with PeakMemory() as mem:
        kept = x * 2
        tmp = torch.cat([x, x])  # 16,000 bytes
        del tmp
        mem.reset_peak()
        other = x * 3
    assert mem.peak == 16 * N  # kept + other
    del kept, other


def test_memory_freed_after_the_block_still_leaves_the_total():
    x = torch.ones(N, dtype=F64)
    with PeakMemory() as mem:
        y = x * 2
    del y
    gc.collect()
    assert mem.live == 0 and mem.peak == 8 * N


def test_saved_bytes_counts_each_storage_once_and_skips_the_excluded():
    a = torch.ones(N, dtype=F64)
    b = torch.ones(2 * N, dtype=torch.float32)
    assert saved_bytes([a, a.view(10, -1), b]) == 8 * N + 8 * N
    assert saved_bytes([a, b], exclude=[a]) == 8 * N


def test_backward_peak_of_a_quadratic_and_a_linear_backward():
    """A backward that saves and builds T×T grows 4× per doubling of T; one that keeps (T, d) grows 2×."""

    def quadratic(q, k):
        return torch.softmax(q @ k.mT, dim=-1) @ k  # saves the (T, T) softmax

    def linear(q, k):
        return torch.tanh(q) * k  # saves (T, d) tensors only

    totals = {}
    for fn in (quadratic, linear):
        for T in (64, 128):
            q, k = torch.randn(T, 8, dtype=F64), torch.randn(T, 8, dtype=F64)
            result = backward_peak(fn, q, k, grad=torch.ones(T, 8, dtype=F64))
            assert result["total"] == result["saved"] + result["backward"]
            totals[fn.__name__, T] = result
    assert totals["quadratic", 64]["saved"] >= 8 * 64 * 64, "the saved softmax is counted"
    assert totals["linear", 64]["saved"] == 8 * 64 * 8, "tanh(q) is saved; q and k are inputs, not counted"
    assert 3.5 < totals["quadratic", 128]["total"] / totals["quadratic", 64]["total"] < 4.5
    assert 1.8 < totals["linear", 128]["total"] / totals["linear", 64]["total"] < 2.2
