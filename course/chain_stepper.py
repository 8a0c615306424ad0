"""Step through x → linear → softmax → cross-entropy with real numbers (notebook 00): as text that prints
anywhere (``table``), as a static diagram (``figure``), as an ipywidgets stepper for a live notebook (``stepper``).

The values come from torch autograd on the chain (``retain_grad`` on each intermediate),
so this module shows numbers to check a derivation against and holds no hand-written
backward.

Limitations: one example (a batch of 1) and a handful of classes — the views are for
reading numbers, not for large tensors.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import torch

F64 = torch.float64
COLUMNS = ("x", "linear: z = x W + b", "softmax: y", "loss: L = −log y_t")


@dataclass(frozen=True)
class Stage:
    step: int  # when it is filled in: 0 = given, then one step per stage
    symbol: str  # "z", "z̄"
    value: torch.Tensor
    direction: str  # "given", "forward" or "backward"
    column: int  # index into COLUMNS
    caption: str  # what this step computes, in one line


def stages(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor, target: int) -> list[Stage]:
    """Every value of the chain for one example: x (1, K), W (K, C), b (C,), target class t.

    Forward: z = xW + b, y = softmax(z), L = −log y_t. Backward: L̄ = 1, then ȳ, z̄, W̄ and
    b̄, x̄ — computed by autograd, numbers to hold your own against.
    """
    x = torch.as_tensor(x, dtype=F64).reshape(1, -1)
    W = torch.as_tensor(W, dtype=F64)
    b = torch.as_tensor(b, dtype=F64)
    (K,), C = x.shape[1:], W.shape[1]
    if W.shape != (K, C) or b.shape != (C,):
        raise ValueError(f"expected W of shape ({K}, C) and b of shape (C,); got W {tuple(W.shape)}, b {tuple(b.shape)}")
    if not 0 <= int(target) < C:
        raise ValueError(f"target must be a class index in [0, {C}); got {target}")
    t = int(target)

    x, W, b = (v.detach().clone().requires_grad_(True) for v in (x, W, b))
    z = x @ W + b  # (1, C)
    y = z.softmax(dim=1)  # (1, C)
    L = -torch.log(y[0, t])  # scalar
    for v in (z, y, L):
        v.retain_grad()
    L.backward()

    def d(v):
        return v.detach().clone()

    M = 1
    return [
        Stage(0, "x", d(x), "given", 0, f"Given: one example x ({M}, {K}), weights W ({K}, {C}), bias b ({C},), target class t = {t}."),
        Stage(0, "W", d(W), "given", 1, ""),
        Stage(0, "b", d(b), "given", 1, ""),
        Stage(1, "z", d(z), "forward", 1, f"Forward: z = x W + b, ({M}, {K}) @ ({K}, {C}) + ({C},) → ({M}, {C}) logits."),
        Stage(2, "y", d(y), "forward", 2, "Forward: y = softmax(z) = e^z / Σ e^z, probabilities that sum to 1."),
        Stage(3, "L", d(L), "forward", 3, f"Forward: L = −log y_t = −log y[{t}]; the loss is small when y_t is near 1."),
        Stage(4, "L̄", torch.ones((), dtype=F64), "backward", 3, "Backward starts: L̄ = ∂L/∂L = 1."),
        Stage(5, "ȳ", d(y.grad), "backward", 2, "ȳ = ∂L/∂y: −1/y_t in slot t, zero elsewhere (shaped like y)."),
        Stage(6, "z̄", d(z.grad), "backward", 1, "z̄ = J_softmaxᵀ ȳ, shaped like z: compare it with y, entry by entry."),
        Stage(7, "W̄", d(W.grad), "backward", 1, f"W̄ ({K}, {C}), shaped like W, and b̄ ({C},), shaped like b: the linear layer's VJPs of z̄."),
        Stage(7, "b̄", d(b.grad), "backward", 1, ""),
        Stage(8, "x̄", d(x.grad), "backward", 0, f"x̄ ({M}, {K}), shaped like x: the linear layer's third VJP. Done."),
    ]


def last_step(all_stages: list[Stage]) -> int:
    return max(s.step for s in all_stages)


def _fmt(value: torch.Tensor, digits: int = 4, width: int | None = None) -> list[str]:
    """A tensor as text lines: one line per row, fixed decimals, columns aligned."""
    v = value.detach().to(F64) + 0.0  # + 0.0 turns -0.0 into 0.0
    width = digits + 4 if width is None else width
    if v.ndim == 0:
        return [f"{v.item():.{digits}f}"]
    rows = v.reshape(-1, v.shape[-1]) if v.ndim > 1 else v.reshape(1, -1)
    lines = ["[" + ", ".join(f"{e:{width}.{digits}f}" for e in row.tolist()) + "]" for row in rows]
    if v.ndim > 1:
        lines = ["[" + lines[0]] + [" " + ln for ln in lines[1:]]
        lines[-1] += "]"
    return lines


def _seen(text: str) -> int:
    """Columns a string takes on screen: a combining bar (the one in x̄) takes none."""
    return sum(1 for ch in text if not unicodedata.combining(ch))


def table(all_stages: list[Stage], upto: int | None = None, digits: int = 4) -> str:
    """Every stage filled in by step ``upto`` (default: all), one block per stage, as plain text."""
    upto = last_step(all_stages) if upto is None else upto
    out = []
    for s in all_stages:
        if s.step > upto:
            continue
        arrow = {"given": " ", "forward": "→", "backward": "←"}[s.direction]
        head = f"{s.step}  {arrow} {s.symbol}{' ' * max(2 - _seen(s.symbol), 0)} {str(tuple(s.value.shape)):<7} "
        lines = _fmt(s.value, digits)
        out.append(head + lines[0])
        out += [" " * _seen(head) + ln for ln in lines[1:]]
    return "\n".join(out)


def figure(all_stages: list[Stage], upto: int | None = None):
    """The chain as a diagram: activations on top (→), gradients below (←), parameters beside z."""
    import matplotlib.pyplot as plt

    upto = last_step(all_stages) if upto is None else upto
    by_symbol = {s.symbol: s for s in all_stages}
    fig, ax = plt.subplots(figsize=(12, 5.2))
    ax.set(xlim=(-0.05, 5.05), ylim=(-1.5, 3.8))
    ax.axis("off")
    top, bottom = 2.0, 0.55
    xs = [0.55, 1.95, 3.35, 4.55]  # column centres
    half = [0.5, 0.55, 0.55, 0.3]  # half-widths of the boxes, where the arrows stop

    def box(x, y, symbols, color):
        shown = [by_symbol[s] for s in symbols if s in by_symbol and by_symbol[s].step <= upto]
        lines = []
        for s in shown:
            body = _fmt(s.value, 3, width=6)
            lines += [f"{s.symbol} = {body[0]}"] + [" " * (_seen(s.symbol) + 3) + ln for ln in body[1:]]
        ax.text(x, y, "\n".join(lines) or "·", ha="center", va="center", family="monospace", fontsize=8.5,
                bbox=dict(boxstyle="round,pad=0.45", fc=color if shown else "white", ec="grey"))
        steps = sorted({s.step for s in shown if s.step > 0})
        if steps:
            ax.text(x, y + 0.22 + 0.09 * len(lines), "step " + ", ".join(map(str, steps)), ha="center", fontsize=7, color="grey")

    for col, title in enumerate(COLUMNS):
        ax.text(xs[col], 3.6, title, ha="center", fontsize=10, weight="bold")
    for col, sym in enumerate(("x", "z", "y", "L")):
        box(xs[col], top, [sym], "#dbe9f6")
    for col, sym in enumerate(("x̄", "z̄", "ȳ", "L̄")):
        box(xs[col], bottom, [sym], "#fde3cf")
    box(xs[1], 3.0, ["W", "b"], "#eeeeee")
    box(xs[1], -0.7, ["W̄", "b̄"], "#fde3cf")
    for i in range(3):
        start, end = xs[i] + half[i], xs[i + 1] - half[i + 1]
        ax.annotate("", xy=(end, top), xytext=(start, top), arrowprops=dict(arrowstyle="->", color="tab:blue", lw=1.5))
        ax.annotate("", xy=(start, bottom), xytext=(end, bottom), arrowprops=dict(arrowstyle="->", color="tab:orange", lw=1.5))
    ax.text(-0.02, top + 0.62, "forward: activations, left to right", color="tab:blue", fontsize=9)
    ax.text(-0.02, bottom - 0.62, "backward: gradients, right to left", color="tab:orange", fontsize=9)
    ax.set_title("x → linear → softmax → cross-entropy: each gradient (orange) has the shape of the value above it", fontsize=10)
    fig.tight_layout()
    return fig


def _html(all_stages: list[Stage], upto: int) -> str:
    """The stepper's view: a table whose cells fill in as the steps advance; the newest is highlighted."""
    cells: dict[tuple[str, int], list[Stage]] = {}
    for s in all_stages:
        parameter = {"W": "parameters", "b": "parameters", "W̄": "parameter gradients", "b̄": "parameter gradients"}
        row = parameter.get(s.symbol, "backward" if s.direction == "backward" else "forward")
        cells.setdefault((row, s.column), []).append(s)

    def cell(row, col):
        shown = [s for s in cells.get((row, col), []) if s.step <= upto]
        if not cells.get((row, col)):
            return "<td></td>"
        if not shown:
            return "<td style='color:#bbb;text-align:center'>·</td>"
        fresh = any(s.step == upto for s in shown) and upto > 0
        style = "background:#fff3b0;" if fresh else ""
        body = "<br>".join(f"<b>{s.symbol}</b> = " + "<br>&nbsp;&nbsp;".join(_fmt(s.value, 4)) for s in shown)
        return f"<td style='{style}font-family:monospace;white-space:pre;padding:4px 8px'>{body}</td>"

    head = "<tr><th></th>" + "".join(f"<th>{c}</th>" for c in COLUMNS) + "</tr>"
    rows = [("forward", "→ forward"), ("parameters", "parameters"), ("backward", "← backward"),
            ("parameter gradients", "parameter gradients")]
    body = "".join(f"<tr><th style='text-align:left'>{label}</th>" + "".join(cell(r, c) for c in range(4)) + "</tr>" for r, label in rows)
    caption = next((s.caption for s in all_stages if s.step == upto and s.caption), "")
    n = last_step(all_stages)
    return f"<p><b>step {upto} of {n}</b> — {caption}</p><table>{head}{body}</table>"


class Stepper:
    """State of the interactive view: which step is shown. Works without a browser (for tests)."""

    def __init__(self, all_stages: list[Stage]):
        self.stages = all_stages
        self.step = 0

    def forward(self) -> None:
        self.step = min(self.step + 1, last_step(self.stages))

    def back(self) -> None:
        self.step = max(self.step - 1, 0)

    def reset(self) -> None:
        self.step = 0

    def html(self) -> str:
        return _html(self.stages, self.step)


def stepper(all_stages: list[Stage]):
    """An ipywidgets stepper over the stages; without ipywidgets, print the full table instead."""
    try:
        import ipywidgets as widgets
    except ImportError:
        print(table(all_stages))
        return None
    state = Stepper(all_stages)
    view = widgets.HTML(state.html())
    buttons = [widgets.Button(description=d) for d in ("◀ Back", "Step ▶", "Reset")]

    def on(action):
        def handler(_):
            action()
            view.value = state.html()
        return handler

    for button, action in zip(buttons, (state.back, state.forward, state.reset)):
        button.on_click(on(action))
    return widgets.VBox([widgets.HBox(buttons), view])

