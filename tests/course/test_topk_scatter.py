"""The top-k scatter picture shows what the math says: every number and arrow checked against autograd."""

import matplotlib.pyplot as plt
import pytest
import torch

from course.topk_scatter import plot_topk_scatter

F64 = torch.float64
X = torch.tensor([0.3, -1.2, 2.1, 0.8, -0.4, 1.7, 0.1, 1.1], dtype=F64)  # N = 8, the notebook's row
DY = torch.tensor([1.0, -0.5, 2.0], dtype=F64)  # k = 3
INDEX = torch.tensor([2, 5, 2, 7, 2])  # slot 2 read three times, slot 7 (the last) once
DY_REP = torch.tensor([1.0, 0.5, -2.0, 1.5, 0.25], dtype=F64)


def topk_scatter(x, k, dy):
    """What the top of the picture should show, by autograd (the course ships no such helper)."""
    leaf = x.clone().requires_grad_(True)
    values, indices = leaf.topk(k)
    (dx,) = torch.autograd.grad(values, leaf, dy)
    return {"indices": indices, "y": values.detach(), "dx": dx}


def repeated_gather(n, index, dy):
    """What the bottom of the picture should show: stores in order, and autograd's sum."""
    stored = torch.zeros(n, dtype=dy.dtype)
    for r in range(index.numel()):
        stored[index[r]] = dy[r]
    leaf = torch.zeros(n, dtype=dy.dtype, requires_grad=True)
    (added,) = torch.autograd.grad(leaf[index], leaf, dy)
    return {"store": stored, "add": added}


def test_the_expected_numbers_are_the_lesson():
    top = topk_scatter(X, 3, DY)
    assert top["indices"].tolist() == [2, 5, 7]  # the last slot is among them
    expected = torch.zeros(8, dtype=F64)
    expected[[2, 5, 7]] = DY
    assert torch.equal(top["dx"], expected)  # ȳ in the chosen slots, zero in the other five
    rep = repeated_gather(8, INDEX, DY_REP)
    assert rep["store"][2].item() == 0.25  # the last of 1, −2, 0.25
    assert rep["add"][2].item() == pytest.approx(1.0 - 2.0 + 0.25)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="1-D x"):
        plot_topk_scatter(X[None], 3, DY, INDEX, DY_REP)
    with pytest.raises(ValueError, match="same shape"):
        plot_topk_scatter(X, 3, DY, INDEX, DY)


def _texts(fig) -> dict[str, str]:
    return {t.get_gid(): t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid()}


def _arrows(fig) -> dict[str, tuple]:
    """gid -> (start x, end x) of every arrow, in cell coordinates."""
    return {a.get_gid(): (a.xyann[0], a.xy[0]) for ax in fig.axes for a in ax.texts
            if a.get_gid() and hasattr(a, "xyann")}


def test_the_picture_draws_autograds_numbers_and_arrows():
    fig = plot_topk_scatter(X, 3, DY, INDEX, DY_REP)
    try:
        texts, arrows = _texts(fig), _arrows(fig)
        top, rep = topk_scatter(X, 3, DY), repeated_gather(8, INDEX, DY_REP)
        for j in range(8):
            assert float(texts[f"topk:dx:{j}"]) == top["dx"][j].item()
            assert float(texts[f"store:dx:{j}"]) == rep["store"][j].item()
            assert float(texts[f"add:dx:{j}"]) == pytest.approx(rep["add"][j].item())
        start = (8 - 3) / 2  # the k-long rows are centred under the N-long ones
        for m, i in enumerate(top["indices"].tolist()):
            assert arrows[f"topk:gather:{m}"] == (i + 0.5, start + m + 0.5)  # x[i_m] → y_m
            assert arrows[f"topk:scatter:{m}"] == (start + m + 0.5, i + 0.5)  # ȳ_m → x̄[i_m]
        for r, j in enumerate(INDEX.tolist()):
            for panel in ("store", "add"):
                assert arrows[f"{panel}:scatter:{r}"][1] == j + 0.5
        assert len([g for g in arrows if g.startswith("topk:scatter")]) == 3  # one arrow per selected value
    finally:
        plt.close(fig)
