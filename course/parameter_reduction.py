"""Which rows each program of a LayerNorm backward touches, and where its share of γ̄ goes.

A backward that gives each program a contiguous group of rows computes x̄ for those rows on
its own, but every row adds into every entry of γ̄ (and β̄). ``program_rows`` says which rows
program p owns when ``rows_per_program = ceil(n_rows / n_programs)``; ``plot_parameter_reduction``
draws the two ways of combining the programs' shares:

- top: each program writes its partial sum into its own row of a (n_programs, N) buffer,
  and a second pass sums the buffer's rows (deterministic, no contention);
- bottom: every program adds into the same N entries with atomics under a lock
  (one pass, but the programs queue, and the order of the additions changes run to run).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

PROGRAM_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")
RESULT_COLOR = "0.55"


def program_rows(n_rows: int, n_programs: int) -> list[range]:
    """The rows program p handles, for p = 0 … n_programs − 1: contiguous groups of ceil(n_rows / n_programs).

    The last non-empty group may be shorter (a ragged end); a program past the last row gets an empty range.
    """
    if n_rows < 1 or n_programs < 1:
        raise ValueError(f"need at least one row and one program; got n_rows={n_rows}, n_programs={n_programs}")
    per = math.ceil(n_rows / n_programs)
    return [range(min(p * per, n_rows), min((p + 1) * per, n_rows)) for p in range(n_programs)]


def _grid(ax, x0: float, y0: float, rows: int, cols: int, colors: list[str], label: str) -> None:
    """A rows×cols block of unit squares with its top-left corner at (x0, y0); row i filled with colors[i]."""
    for i in range(rows):
        for j in range(cols):
            ax.add_patch(Rectangle((x0 + j, y0 + i), 1, 1, facecolor=colors[i], edgecolor="white", linewidth=0.8))
    ax.add_patch(Rectangle((x0, y0), cols, rows, fill=False, edgecolor="0.2", linewidth=1.0))
    ax.text(x0 + cols / 2, y0 - 0.4, label, ha="center", va="bottom", fontsize=9)


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], color: str) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10, color=color, linewidth=1.0,
                                 shrinkA=2, shrinkB=2))


def plot_parameter_reduction(n_rows: int = 7, n_cols: int = 6, n_programs: int = 3):
    """Draw the two ways the programs' shares of γ̄ are combined; returns the matplotlib Figure.

    Rows of x, ȳ and x̄ are coloured by the program that owns them. Top: one buffer row per
    program, then a second pass. Bottom: every program adds into γ̄ itself, under a lock.
    """
    groups = program_rows(n_rows, n_programs)
    owner = [p for p, rows in enumerate(groups) for _ in rows]
    mids = {p: (rows.start + rows.stop) / 2 for p, rows in enumerate(groups) if len(rows)}  # programs with rows
    colors = [PROGRAM_COLORS[p % len(PROGRAM_COLORS)] for p in owner]
    gap = 4.0
    x_buf = n_cols + gap
    x_out = x_buf + n_cols + gap
    width = x_out + n_cols + 0.5
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7.6))

    # Top: partial sums into a (n_programs, N) buffer, then a second pass.
    _grid(top, 0, 0, n_rows, n_cols, colors, f"x, ȳ → x̄ ({n_rows}×{n_cols})\nrow r: program that owns it")
    buf_colors = [PROGRAM_COLORS[p % len(PROGRAM_COLORS)] for p in range(n_programs)]
    _grid(top, x_buf, 0, n_programs, n_cols, buf_colors, f"partial γ̄ ({n_programs}×{n_cols})\nrow p: program p only")
    _grid(top, x_out, 0, 1, n_cols, [RESULT_COLOR], f"γ̄ ({n_cols},)\nsecond pass: Σ over rows")
    for p, mid in mids.items():
        _arrow(top, (n_cols, mid), (x_buf, p + 0.5), buf_colors[p])
    for p in range(n_programs):
        _arrow(top, (x_buf + n_cols, p + 0.5), (x_out, 0.5), "0.3")
    top.set_title("Partial sums, then a second pass: each program writes only its own buffer row.\n"
                  "Same additions in the same order every run; no program waits for another.",
                  fontsize=10, loc="left")

    # Bottom: atomics into γ̄ itself, one program at a time through a lock.
    _grid(bottom, 0, 0, n_rows, n_cols, colors, f"x, ȳ → x̄ ({n_rows}×{n_cols})")
    _grid(bottom, x_out, 0, 1, n_cols, [RESULT_COLOR], f"γ̄ ({n_cols},)\natomic adds under a lock")
    lock_x = x_buf + n_cols / 2
    bottom.text(lock_x, 0.5, "lock", ha="center", va="center", fontsize=9,
                bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "0.2"})
    for p, mid in mids.items():
        _arrow(bottom, (n_cols, mid), (lock_x - 1.2, 0.5), buf_colors[p])
    _arrow(bottom, (lock_x + 1.2, 0.5), (x_out, 0.5), "0.3")
    bottom.set_title("Atomics: every program adds into the same entries, one at a time.\n"
                     "One pass, but programs queue at the lock, and the order of the additions varies.",
                     fontsize=10, loc="left")

    for ax in (top, bottom):
        for p, mid in mids.items():
            ax.text(-0.3, mid, f"program {p}", ha="right", va="center", fontsize=8, color=buf_colors[p])
        ax.set_xlim(-3.2, width)
        ax.set_ylim(n_rows + 0.5, -2.0)  # row 0 at the top, room above for labels
        ax.set_aspect("equal")
        ax.axis("off")
    fig.tight_layout()
    return fig
