"""What one output element of each backward matmul reads — the picture behind "x̄ is parallel, W̄ reduces".

For y = x W with x (B, K), W (K, N) and the incoming gradient ȳ (B, N):

    x̄ = ȳ Wᵀ    x̄[b, k] = Σₙ ȳ[b, n] W[k, n]    reads row b of ȳ and row k of W   (N + N values)
    W̄ = xᵀ ȳ    W̄[k, n] = Σ_b x[b, k] ȳ[b, n]   reads column k of x and column n of ȳ (B + B values)

``reads`` gives those index sets; ``plot_backward_reads`` draws them, with the batch axis
cut into the row blocks a GPU kernel would hand to different programs.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

Index = tuple[int, int]

READ_COLOR = {"first": "tab:blue", "second": "tab:orange"}
OUT_COLOR = "tab:red"


def reads(B: int, K: int, N: int, *, b: int, k: int, n: int) -> dict[str, dict[str, set[Index]]]:
    """Entries (row, column), in each tensor's own layout, that x̄[b, k] and W̄[k, n] depend on.

    ``reads(...)["dx"]`` maps "dy" and "w" to what x̄[b, k] reads; ``["dw"]`` maps "x" and "dy"
    to what W̄[k, n] reads.
    """
    if not (0 <= b < B and 0 <= k < K and 0 <= n < N):
        raise ValueError(f"need 0 ≤ b < B, 0 ≤ k < K, 0 ≤ n < N; got b={b}, k={k}, n={n} for B={B}, K={K}, N={N}")
    return {
        "dx": {"dy": {(b, j) for j in range(N)}, "w": {(k, j) for j in range(N)}},
        "dw": {"x": {(i, k) for i in range(B)}, "dy": {(i, n) for i in range(B)}},
    }


def _matrix(ax, x0: float, rows: int, cols: int, cells: set[Index], color: str, label: str, *,
            row_blocks: int = 0, col_blocks: int = 0) -> None:
    """Draw a rows×cols matrix with its top-left corner at (x0, 0), one unit per entry, filling ``cells``.

    Dashed lines cut the rows (or columns) into the blocks a kernel would give to different programs.
    """
    for i in range(rows):
        for j in range(cols):
            filled = (i, j) in cells
            ax.add_patch(Rectangle((x0 + j, i), 1, 1, facecolor=color if filled else "white",
                                   edgecolor="0.75", linewidth=0.6))
    ax.add_patch(Rectangle((x0, 0), cols, rows, fill=False, edgecolor="0.2", linewidth=1.0))
    for cut in range(1, row_blocks):
        ax.plot([x0, x0 + cols], [cut * rows / row_blocks] * 2, color="0.2", linestyle="--", linewidth=1.0)
    for cut in range(1, col_blocks):
        ax.plot([x0 + cut * cols / col_blocks] * 2, [0, rows], color="0.2", linestyle="--", linewidth=1.0)
    ax.text(x0 + cols / 2, -0.6, label, ha="center", va="bottom", fontsize=9)


def _row(ax, operands, caption: str, width: float, height: float) -> None:
    """Lay out ``A @ B = C`` left to right; ``operands`` are (rows, cols, cells, color, label, blocks) tuples."""
    x0, gap = 0.0, 2.0
    for position, (rows, cols, cells, color, label, blocks) in enumerate(operands):
        _matrix(ax, x0, rows, cols, cells, color, label, **blocks)
        x0 += cols
        if position < 2:
            ax.text(x0 + gap / 2, min(rows, height) / 2, "@" if position == 0 else "=", ha="center", va="center", fontsize=16)
            x0 += gap
    ax.set_xlim(-0.5, width)
    ax.set_ylim(height + 0.5, -3.2)  # row 0 at the top, like a printed matrix; room above for labels
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(caption, fontsize=10, loc="left")


def plot_backward_reads(B: int = 16, K: int = 5, N: int = 4, *, b: int = 5, k: int = 1, n: int = 2, blocks: int = 4):
    """Draw which entries x̄[b, k] and W̄[k, n] read; the batch axis is cut into ``blocks`` row blocks.

    Top: ȳ @ Wᵀ = x̄. Bottom: xᵀ @ ȳ = W̄. Each operand is drawn as it enters the product
    (Wᵀ and xᵀ transposed), one square per entry at the same scale throughout, the read
    entries filled and the output element in red. Returns the matplotlib Figure.
    """
    r = reads(B, K, N, b=b, k=k, n=n)
    flip = lambda cells: {(j, i) for i, j in cells}  # noqa: E731 — where W's and x's entries sit once transposed
    first, second = READ_COLOR["first"], READ_COLOR["second"]
    width = max(N + K + K, B + N + N) + 4.5  # three matrices and two gaps of 2
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 9), gridspec_kw={"height_ratios": [B + 4, max(K, B) + 4]})
    _row(top, [
        (B, N, r["dx"]["dy"], first, f"ȳ ({B}×{N})\nrow b = {b}", {"row_blocks": blocks}),
        (N, K, flip(r["dx"]["w"]), second, f"Wᵀ ({N}×{K})\nrow k = {k} of W", {}),
        (B, K, {(b, k)}, OUT_COLOR, f"x̄ ({B}×{K})\nx̄[{b}, {k}]", {"row_blocks": blocks}),
    ], f"x̄ = ȳ Wᵀ: x̄[b, k] reads {N} + {N} values — a sum over the features.\n"
       f"A block of rows of x̄ needs only the same rows of ȳ: the {blocks} blocks never wait for each other.",
       width, B)
    _row(bottom, [
        (K, B, flip(r["dw"]["x"]), first, f"xᵀ ({K}×{B})\ncolumn k = {k} of x", {"col_blocks": blocks}),
        (B, N, r["dw"]["dy"], second, f"ȳ ({B}×{N})\ncolumn n = {n}", {"row_blocks": blocks}),
        (K, N, {(k, n)}, OUT_COLOR, f"W̄ ({K}×{N})\nW̄[{k}, {n}]", {}),
    ], f"W̄ = xᵀ ȳ: W̄[k, n] reads {B} + {B} values — a sum over the batch.\n"
       f"Each of the {blocks} row blocks holds only a partial sum of W̄[{k}, {n}]: the blocks must add up.",
       width, max(K, B))
    fig.tight_layout()
    return fig
