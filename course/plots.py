"""Small plotting helpers shared by the notebooks (matplotlib, static, so they render in nbval and on GitHub)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch


def _np(a) -> np.ndarray:
    return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def loglog(x, curves: Mapping[str, Sequence[float]], *, xlabel: str, ylabel: str, title: str = "",
           marks: Mapping[str, float] | None = None, ax=None):
    """Several curves on log–log axes; ``marks`` draws labelled vertical lines (e.g. the best eps)."""
    ax = ax or plt.subplots(figsize=(6.4, 4.0))[1]
    for label, y in curves.items():
        ax.loglog(_np(x), _np(y), marker="o", markersize=3, label=label)
    for label, at in (marks or {}).items():
        ax.axvline(at, color="grey", linestyle="--", linewidth=1)
        ax.annotate(label, (at, ax.get_ylim()[1]), rotation=90, va="top", ha="right", fontsize=8, color="grey")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    return ax


def matrices(panels: Mapping[str, object], *, title: str = "", cmap: str = "RdBu_r"):
    """Draw tensors side by side as heat maps with a symmetric colour scale (zero is white)."""
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.0), squeeze=False)
    for ax, (label, m) in zip(axes[0], panels.items()):
        a = _np(m)
        a = a.reshape(1, -1) if a.ndim == 1 else a
        lim = float(np.abs(a).max()) or 1.0
        ax.imshow(a, cmap=cmap, vmin=-lim, vmax=lim)
        ax.set_title(f"{label}\n{tuple(a.shape)}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
