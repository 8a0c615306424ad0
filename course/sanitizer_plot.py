"""The picture behind a sanitizer report: which programs touched which elements of one tensor in a launch.

One square per element (the last axis across, the others down). A square is split into one stripe per program
that touched it, in that program's colour: solid where the program wrote it (a store or an atomic), pale where
it only read it; white: no program touched it. The programs' numbers are written in the squares when they fit.
A square outlined in red is a race: a plain store met another program there. So a reduction done right shows one
colour per written square (per-program rows, then a second pass) or stripes without red (atomics), and a
read-add-store between programs shows red squares. Sharing guarded by a lock (the report says no race) is
outlined dashed instead.

Every square, outline and label carries a ``gid`` (``"cell:1:2"``, ``"race:1:2"``, ``"label:1:2"``) so a test can
read the picture back.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import PatchCollection
from matplotlib.colors import to_rgb
from matplotlib.patches import Patch, Rectangle

RACE = "red"
PALE = 0.35  # how much of a program's colour a read-only stripe keeps (the rest is white)
MAX_LEGEND = 12  # programs named in the legend; the rest are "…"
MAX_LABELLED = 400  # elements up to which the programs' numbers are written in the squares
MAX_SQUARES = 1024  # elements up to which each is drawn as a striped square; a larger tensor is drawn as an image
SEVERAL = "0.25"  # a large tensor's element that several programs touched without a race
MAX_STRIPES = 8  # programs drawn in one square; the label still counts them all


def _as_grid(shape: tuple[int, ...]) -> tuple[int, int]:
    """A tensor's elements as rows × columns: its last axis across, the others down."""
    if not shape:
        return 1, 1
    return (int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1), int(shape[-1])


def _axes(grid: tuple[int, int, int]) -> int:
    """How many axes the grid was launched with, as far as can be told (trailing 1s dropped)."""
    return 3 if grid[2] > 1 else 2 if grid[1] > 1 else 1


def _name(program: tuple[int, int, int], grid: tuple[int, int, int]) -> str:
    """A program as the student launched it: ``3`` on a 1-D grid, ``(3, 1)`` on a 2-D one."""
    axes = _axes(grid)
    return str(program[0]) if axes == 1 else "(" + ", ".join(map(str, program[:axes])) + ")"


def _colours(n: int) -> list[tuple[float, float, float]]:
    """n distinguishable colours, none of them the race's red; beyond 9 they repeat (the labels in the squares
    still tell programs apart)."""
    palette = [plt.get_cmap("tab10")(i) for i in (0, 1, 2, 4, 5, 6, 7, 8, 9)]  # strong colours: pale means read
    return [to_rgb(palette[i % len(palette)]) for i in range(n)]


def _who(touched: dict[str, np.ndarray], n: int):
    """Per element: the programs that touched it, those that wrote it, and those that stored to it plainly."""
    touchers: list[set[int]] = [set() for _ in range(n)]
    writers: list[set[int]] = [set() for _ in range(n)]
    plain: list[set[int]] = [set() for _ in range(n)]
    for kind in ("load", "store", "atomic"):
        programs, elements = touched[kind]
        for p, e in zip(programs.tolist(), elements.tolist()):
            touchers[e].add(p)
            if kind != "load":
                writers[e].add(p)
            if kind == "store":
                plain[e].add(p)
    return touchers, writers, plain


def _label(programs: list[int], names: list[str]) -> str:
    """The programs' numbers if they fit in a square, else how many there were."""
    text = ",".join(names[p] for p in programs)
    return text if len(text) <= 8 else f"{len(programs)} progs"


def _pale(rgb) -> np.ndarray:
    return 1 - PALE * (1 - np.asarray(rgb))


def _squares(ax, cols, touchers, writers, raced, reported, colour, names) -> None:
    """One square per element, striped by the programs that touched it, labelled, races outlined.

    Each square's first stripe is an artist of its own (its gid, ``cell:r:c``, is what a test reads back); the other
    stripes and the grey outlines go in two collections, and nothing updates the data limits as it is added (the
    caller sets them): a thousand squares draw in a fraction of a second."""
    stripes, stripe_colours, outlines = [], [], []
    for e, who in enumerate(touchers):
        r, c = divmod(e, cols)
        who = sorted(who)
        if not who:
            ax.add_artist(Rectangle((c, r), 1, 1, facecolor="white", edgecolor="0.85", linewidth=0.5, gid=f"cell:{r}:{c}"))
            continue
        width = 1.0 / min(len(who), MAX_STRIPES)
        for k, p in enumerate(who[:MAX_STRIPES]):  # one stripe per program, solid if it wrote, pale if it only read
            rgb = colour[p] if p in writers[e] else _pale(colour[p])
            if k == 0:
                ax.add_artist(Rectangle((c, r), width, 1, facecolor=rgb, edgecolor="none", gid=f"cell:{r}:{c}"))
            else:
                stripes.append(Rectangle((c + k * width, r), width, 1))
                stripe_colours.append(rgb)
        outlines.append(Rectangle((c, r), 1, 1))
        if len(touchers) <= MAX_LABELLED:
            ax.text(c + 0.5, r + 0.5, _label(who, names), ha="center", va="center", gid=f"label:{r}:{c}",
                    fontsize=7, color="black",
                    bbox={"boxstyle": "round,pad=0.1", "facecolor": "white", "alpha": 0.6, "edgecolor": "none"})
    if stripes:
        ax.add_collection(PatchCollection(stripes, facecolors=stripe_colours, edgecolors="none"), autolim=False)
    if outlines:
        ax.add_collection(PatchCollection(outlines, facecolors="none", edgecolors="0.6", linewidths=0.5), autolim=False)
    for e in np.flatnonzero(raced):
        r, c = divmod(int(e), cols)
        ax.add_artist(Rectangle((c + 0.04, r + 0.04), 0.92, 0.92, fill=False, edgecolor=RACE if reported else "0.2",
                                linestyle="-" if reported else "--", linewidth=2.2, gid=f"race:{r}:{c}"))


def _image(ax, rows, cols, touchers, writers, raced, reported, colour) -> None:
    """A large tensor as an image, one pixel per element (drawing a square each would take minutes): a program's
    colour where one program touched it, dark grey where several met without a race, red where they raced."""
    rgb = np.ones((rows * cols, 3))
    for e, who in enumerate(touchers):
        if len(who) == 1:
            (p,) = who
            rgb[e] = colour[p] if writers[e] else _pale(colour[p])
        elif who:
            rgb[e] = to_rgb(RACE) if raced[e] and reported else to_rgb(SEVERAL)
    ax.imshow(rgb.reshape(rows, cols, 3), extent=(0, cols, rows, 0), interpolation="nearest", gid="image")


def plot_touches(launch, tensor: str, kept: int):
    """Draw ``launch``'s touches of argument ``tensor`` (a :class:`course.sanitizer.Launch`), whose tensors of up to
    ``kept`` elements were kept for the picture; returns the Figure."""
    if tensor not in launch.tensors:
        raise ValueError(f"tensor must name a tensor argument of {launch.kernel}: one of {sorted(launch.tensors)}; "
                         f"got {tensor!r}")
    if getattr(launch, "broken", ""):
        raise ValueError(f"the sanitizer could not record {launch.kernel} ({launch.broken}): nothing to draw")
    if tensor not in launch.touched:
        shape = launch.tensors[tensor][0]
        why = (f"has {int(np.prod(shape, dtype=np.int64))} elements, more than the picture keeps"
               if int(np.prod(shape, dtype=np.int64)) > kept else "was touched by too many accesses to keep")
        raise ValueError(f"{tensor} of {launch.kernel} {why}: launch the kernel on smaller tensors to draw it")
    shape, dtype = launch.tensors[tensor]
    rows, cols = _as_grid(shape)
    n = rows * cols
    touchers, writers, plain = _who(launch.touched[tensor], n)
    seen = sorted(set().union(*touchers)) if n else []
    names = [_name(launch.programs[p] if p < len(launch.programs) else (p, 0, 0), launch.grid)
             for p in range(max(seen, default=-1) + 1)]
    colour = dict(zip(seen, _colours(len(seen))))
    raced = np.array([bool(plain[e]) and len(touchers[e]) > 1 for e in range(n)], dtype=bool)
    # The picture cannot see locks; the report can. Without a race reported on this tensor, shared squares were
    # guarded (a lock) and are outlined dashed, not red.
    reported = any(f.cls == "race" and f.tensor == tensor for f in launch.findings)

    # Inches per square: large enough to read a label, small enough that the whole tensor fits about 10 × 8 inches.
    side = min(0.55, 10.0 / cols, 8.0 / rows)
    fig, ax = plt.subplots(figsize=(max(6.5, 1.2 + side * cols), 2.0 + side * rows), layout="constrained")
    if n <= MAX_SQUARES:
        _squares(ax, cols, touchers, writers, raced, reported, colour, names)
    else:
        _image(ax, rows, cols, touchers, writers, raced, reported, colour)

    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)  # row 0 on top, as the tensor prints
    ax.set_aspect("equal")
    step = 1 if cols <= 24 else int(np.ceil(cols / 12))
    ax.set_xticks(np.arange(0, cols, step) + 0.5, [str(i) for i in range(0, cols, step)], fontsize=8)
    step = 1 if rows <= 24 else int(np.ceil(rows / 12))
    ax.set_yticks(np.arange(0, rows, step) + 0.5, [str(i) for i in range(0, rows, step)], fontsize=8)
    ax.set_xlabel("column (last axis)", fontsize=9)
    ax.set_ylabel("row" if len(shape) <= 2 else "row (leading axes flattened)", fontsize=9)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)

    if raced.any() and reported:
        verdict = f"{int(raced.sum())} element(s) raced (red): a plain store met another program"
    elif raced.any():
        verdict = "shared elements, each guarded by a lock: no race"
    elif any(len(w) > 1 for w in writers):  # several writers and no plain store among them: atomics
        verdict = "programs meet only through atomics: no race"
    elif not any(writers):
        verdict = "only read (pale): no race"
    else:
        verdict = "each element written by at most one program: no race"
    outside = sum(f.count for f in launch.findings if f.cls == "out-of-bounds" and f.tensor == tensor)
    if outside:  # an address outside the tensor has no square: say so, or the picture looks clean
        verdict += f"\nand {outside} access(es) out of bounds, next to {tensor}: not drawn, see the report"
    fig.suptitle(f"{launch.kernel}, grid {launch.grid[:_axes(launch.grid)]}: {tensor} {tuple(shape)} {dtype}\n{verdict}",
                 fontsize=10, x=0.02, ha="left")

    legend = [Patch(facecolor=colour[p], label=f"program {names[p]}") for p in seen[:MAX_LEGEND]]
    if len(seen) > MAX_LEGEND:
        legend.append(Patch(facecolor="white", edgecolor="none", label=f"… {len(seen) - MAX_LEGEND} more"))
    legend += [Patch(facecolor=_pale(colour[seen[0]]) if seen else "0.9", label="pale: read only"),
               Patch(facecolor="white", edgecolor="0.6", label="white: not touched")]
    several = any(len(who) > 1 for who in touchers)
    if n > MAX_SQUARES and several:
        legend.append(Patch(facecolor=SEVERAL, label="several programs, no race"))
    if raced.any():
        legend.append(Patch(fill=n > MAX_SQUARES, facecolor=RACE, edgecolor=RACE if reported else "0.2", linewidth=2,
                            linestyle="-" if reported else "--", label="race" if reported else "shared under a lock"))
    fig.legend(handles=legend, loc="outside lower center", ncol=min(len(legend), 4), fontsize=8, frameon=False)
    return fig
