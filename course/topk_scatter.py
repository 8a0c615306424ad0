"""The picture of top-k's backward: a gather forward, its backward, and what a repeated index does.

Only a picture: ``plot_topk_scatter`` returns a Figure, never a gradient (notebook 06 shows it after the
students wrote these backwards), and draws numbers computed by torch's own autograd. Underneath the top-k,
a gather that reads one slot several times, its gradient written back once by plain stores run one after
another (on a GPU, which of racing stores survives is unspecified) and once by autograd. Every text and
arrow carries a ``gid`` (``"topk:dx:5"``, ``"topk:scatter:0"``, ``"add:dx:2"``) so a test can read it back.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Rectangle

CHOSEN = "tab:orange"  # a selected slot of x, and the y it becomes
GRADIENT = "tab:blue"  # a slot of x̄ that receives gradient
LOST = "tab:red"  # a slot where a store dropped contributions


def _cells(ax, x0: float, y0: float, values, name: str, gid: str, faces) -> None:
    """A row of unit cells with their values written in; ``faces`` gives each cell's colour (None: white)."""
    for j, v in enumerate(values):
        face = faces[j] or "white"
        ax.add_patch(Rectangle((x0 + j, y0), 1, 1, facecolor=face, edgecolor="0.3", linewidth=0.8, alpha=0.85))
        colour = "0.6" if float(v) == 0.0 and faces[j] is None else "black"
        ax.text(x0 + j + 0.5, y0 + 0.5, f"{float(v):g}", ha="center", va="center", fontsize=8, color=colour,
                gid=f"{gid}:{j}")
    ax.text(x0 - 0.3, y0 + 0.5, name, ha="right", va="center", fontsize=10)


def _arrow(ax, start, end, colour: str, gid: str) -> None:
    ax.annotate("", xy=end, xytext=start, gid=gid,
                arrowprops={"arrowstyle": "->", "color": colour, "linewidth": 1.2, "shrinkA": 2, "shrinkB": 2})


def _frame(ax, width: float, height: float, title: str) -> None:
    ax.set_xlim(-2.2, width + 0.3)
    ax.set_ylim(-0.3, height)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=10)


def plot_topk_scatter(x: torch.Tensor, k: int, dy: torch.Tensor, index: torch.Tensor, dy_repeated: torch.Tensor):
    """Top: top-k of ``x`` and its backward. Bottom: a gather by ``index`` (with repeats), scattered back two ways.

    ``x`` is 1-D and ``dy`` has shape (k,); ``index`` is 1-D and ``dy_repeated`` has its shape. Returns the Figure.
    """
    if x.ndim != 1 or dy.shape != (k,):
        raise ValueError(f"need a 1-D x and dy of shape ({k},); got x {tuple(x.shape)}, dy {tuple(dy.shape)}")
    if index.ndim != 1 or dy_repeated.shape != index.shape:
        raise ValueError(f"need a 1-D index and dy_repeated of the same shape; got {tuple(index.shape)} and "
                         f"{tuple(dy_repeated.shape)}")
    n = x.numel()
    # What the picture draws, by autograd, so that every number in it is the true gradient.
    leaf = x.detach().clone().requires_grad_(True)
    values, indices = leaf.topk(k)
    (dx,) = torch.autograd.grad(values, leaf, dy)
    stored = torch.zeros(n, dtype=dy_repeated.dtype)
    for r in range(index.numel()):  # one write after another: each overwrites the one before
        stored[index[r]] = dy_repeated[r]
    table = torch.zeros(n, dtype=dy_repeated.dtype, requires_grad=True)
    (added,) = torch.autograd.grad(table[index], table, dy_repeated)
    uses = torch.bincount(index, minlength=n)
    chosen = set(indices.tolist())
    fig = plt.figure(figsize=(10.0, 6.4))
    grid = fig.add_gridspec(2, 2, height_ratios=[1.25, 1.0])
    ax = fig.add_subplot(grid[0, :])
    y_start = (n - k) / 2  # centre the k-long rows under the n-long ones
    _cells(ax, 0, 6.0, x.detach(), "x", "topk:x", [CHOSEN if j in chosen else None for j in range(n)])
    _cells(ax, y_start, 4.0, values.detach(), "y = x[i]", "topk:y", [CHOSEN] * k)
    _cells(ax, y_start, 2.4, dy, "ȳ", "topk:dy", [GRADIENT] * k)
    _cells(ax, 0, 0.4, dx, "x̄", "topk:dx", [GRADIENT if j in chosen else None for j in range(n)])
    for m, i in enumerate(indices.tolist()):
        _arrow(ax, (i + 0.5, 6.0), (y_start + m + 0.5, 5.0), CHOSEN, f"topk:gather:{m}")
        _arrow(ax, (y_start + m + 0.5, 2.4), (i + 0.5, 1.4), GRADIENT, f"topk:scatter:{m}")
    ax.text(n + 0.1, 5.5, "forward: gather", fontsize=8, color=CHOSEN, va="center")
    ax.text(n + 0.1, 1.9, "backward: scatter\n(0 everywhere else)", fontsize=8, color=GRADIENT, va="center")
    _frame(ax, n + 2.5, 7.3, f"top-k, N = {n}, k = {k}: indices {indices.tolist()} — no FLOPs, only moves")

    many = uses >= 2
    M = index.numel()
    start = (n - M) / 2
    for col, (key, result, title) in enumerate((("store", stored, "plain stores in order: the last writer wins"),
                                                ("add", added, "atomic add: every contribution counts"))):
        ax = fig.add_subplot(grid[1, col])
        _cells(ax, start, 2.6, dy_repeated, "ȳ", f"{key}:dy", [GRADIENT] * M)
        faces = [(LOST if key == "store" else GRADIENT) if many[j] else (GRADIENT if uses[j] else None)
                 for j in range(n)]
        _cells(ax, 0, 0.2, result, "x̄", f"{key}:dx", faces)
        for r, j in enumerate(index.tolist()):
            _arrow(ax, (start + r + 0.5, 2.6), (j + 0.5, 1.2), LOST if (key == "store" and many[j]) else GRADIENT,
                   f"{key}:scatter:{r}")
        _frame(ax, n, 3.9, f"{title}\nindex {index.tolist()}")
    fig.tight_layout()
    return fig
