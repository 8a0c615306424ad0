"""The picture behind a sanitizer report: which program touched which element of one tensor in a launch.

Left, each element coloured by the program that last wrote it (a plain store or an atomic; white: never written,
grey: only read). Right, how many programs touched it, elements where a plain store meets another program
outlined in red: the race. A reduction done right shows one program per written element (per-program rows, a
second pass) or atomics; a read-add-store between programs shows the red squares.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Rectangle


def _as_grid(shape: tuple[int, ...]) -> tuple[int, int]:
    """A tensor's elements as rows × columns: its last axis across, the others down."""
    if not shape:
        return 1, 1
    cols = shape[-1]
    return int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1, cols


def plot_touches(launch, tensor: str):
    """Draw ``launch``'s touches of argument ``tensor`` (a :class:`course.sanitizer.Launch`); returns the Figure."""
    if tensor not in launch.tensors:
        raise ValueError(f"tensor must name a tensor argument of {launch.kernel}: one of {sorted(launch.tensors)}; "
                         f"got {tensor!r}")
    if tensor not in launch.touched:
        raise ValueError(f"{tensor} has too many elements to draw; launch the kernel on a smaller one")
    shape, _ = launch.tensors[tensor]
    rows, cols = _as_grid(shape)
    n = rows * cols
    touched = launch.touched[tensor]
    writer = np.full(n, -1, dtype=np.int64)  # the last program that wrote each element
    readers: list[set[int]] = [set() for _ in range(n)]
    plain: list[set[int]] = [set() for _ in range(n)]
    for kind in ("load", "atomic", "store"):
        programs, elements = touched[kind]
        for p, e in zip(programs.tolist(), elements.tolist()):
            readers[e].add(p)
            if kind != "load":
                writer[e] = p
            if kind == "store":
                plain[e].add(p)
    count = np.array([len(r) for r in readers]).reshape(rows, cols)
    raced = np.array([bool(plain[e]) and len(readers[e]) > 1 for e in range(n)]).reshape(rows, cols)

    programs = max(1, len(set(writer.tolist()) - {-1}))
    colors = plt.get_cmap("tab20" if programs > 10 else "tab10")
    ids = {p: i for i, p in enumerate(sorted(set(writer.tolist()) - {-1}))}
    image = np.array([ids[w] + 2 if w >= 0 else (1 if readers[e] else 0) for e, w in enumerate(writer)])
    palette = ListedColormap(["white", "0.8"] + [colors(i % colors.N) for i in range(programs)])

    width = min(14.0, 3.0 + 0.45 * cols * 2)
    fig, (left, right) = plt.subplots(1, 2, figsize=(width, 1.5 + 0.45 * rows))
    left.imshow(image.reshape(rows, cols), cmap=palette, vmin=0, vmax=programs + 1, aspect="equal")
    left.set_title(f"{tensor}: the program that wrote each element", fontsize=10)
    shown = count.max() if count.size else 1
    im = right.imshow(count, cmap="Greys", vmin=0, vmax=max(2, shown), aspect="equal")
    right.set_title("how many programs touched it (red: a race)", fontsize=10)
    fig.colorbar(im, ax=right, fraction=0.046, pad=0.04, label="programs")
    for r, c in zip(*np.nonzero(raced)):
        right.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
    for ax in (left, right):
        ax.set_xlabel("column")
        ax.set_ylabel("row")
        ax.set_xticks(range(cols) if cols <= 16 else [])
        ax.set_yticks(range(rows) if rows <= 16 else [])
    legend = [Rectangle((0, 0), 1, 1, color=colors(ids[p] % colors.N), label=f"program {launch.programs[p] if p < len(launch.programs) else p}")
              for p in sorted(ids)[:10]]
    if legend:
        left.legend(handles=legend, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.suptitle(f"{launch.kernel}, grid {launch.grid}", fontsize=11)
    fig.tight_layout()
    return fig

