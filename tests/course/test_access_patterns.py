"""The access-pattern picture shows what the math says: checked against autograd's dependency pattern."""

import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.colors import to_rgba

from course.access_patterns import OUT_COLOR, READ_COLOR, plot_backward_reads, reads

B, K, N = 7, 5, 3  # three different sizes, so a swapped axis cannot hide


def depends_on(output_entry, inputs):
    """For each input, the set of its entries that a scalar output entry depends on (nonzero gradient)."""
    leaves = [t.clone().requires_grad_(True) for t in inputs]
    grads = torch.autograd.grad(output_entry(*leaves), leaves)
    return [{tuple(i) for i in torch.nonzero(g).tolist()} for g in grads]


@pytest.mark.parametrize("b, k, n", [(0, 0, 0), (6, 4, 2), (3, 1, 1)])  # corners and the middle
def test_reads_match_what_each_output_entry_depends_on(b, k, n):
    gen = torch.Generator().manual_seed(0)
    x, w, dy = (torch.randn(s, generator=gen, dtype=torch.float64) + 3 for s in ((B, K), (K, N), (B, N)))  # no zeros
    r = reads(B, K, N, b=b, k=k, n=n)
    dy_read, w_read = depends_on(lambda dy, w: (dy @ w.mT)[b, k], (dy, w))  # x̄ = ȳ Wᵀ
    assert r["dx"] == {"dy": dy_read, "w": w_read}
    x_read, dy_read = depends_on(lambda x, dy: (x.mT @ dy)[k, n], (x, dy))  # W̄ = xᵀ ȳ
    assert r["dw"] == {"x": x_read, "dy": dy_read}
    assert len(r["dx"]["dy"]) == N and len(r["dw"]["x"]) == B  # a sum over features; a sum over the batch


def test_an_index_outside_the_matrices_is_refused():
    with pytest.raises(ValueError, match="0 ≤ b < B"):
        reads(B, K, N, b=B, k=0, n=0)


def test_the_plot_fills_exactly_the_read_entries_and_one_output_each():
    fig = plot_backward_reads(B=B, K=K, N=N, b=2, k=1, n=0, blocks=3)
    try:
        top, bottom = fig.axes
        for ax, reads_per_operand in ((top, N), (bottom, B)):
            faces = [to_rgba(p.get_facecolor()) for p in ax.patches if p.get_fill()]
            assert faces.count(to_rgba(READ_COLOR["first"])) == reads_per_operand
            assert faces.count(to_rgba(READ_COLOR["second"])) == reads_per_operand
            assert faces.count(to_rgba(OUT_COLOR)) == 1
    finally:
        plt.close(fig)
