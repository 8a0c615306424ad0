"""The chain stepper shows the right numbers, in the right order, in all three views."""

import matplotlib
import pytest
import torch

from course import chain_stepper as cs

pytestmark = pytest.mark.filterwarnings("error")
F64 = torch.float64

# The notebook's chain: one example, two inputs, three classes, true class 2.
X = torch.tensor([[1.0, -2.0]], dtype=F64)
W = torch.tensor([[0.5, -0.4, 0.3], [0.2, 0.6, -0.1]], dtype=F64)
B = torch.tensor([0.1, 0.0, -0.2], dtype=F64)
T = 2


@pytest.fixture(scope="module")
def stages():
    return cs.stages(X, W, B, T)


def test_values_match_the_derivation_by_hand(stages):
    v = {s.symbol: s.value for s in stages}
    z = X @ W + B
    y = torch.exp(z) / torch.exp(z).sum()
    e_t = torch.tensor([[0.0, 0.0, 1.0]], dtype=F64)
    expected = {
        "z": z,
        "y": y,
        "L": -torch.log(y[0, T]),
        "L̄": torch.tensor(1.0, dtype=F64),
        "ȳ": torch.where(e_t.bool(), -1 / y, torch.zeros_like(y)),
        "z̄": y - e_t,  # the softmax + cross-entropy collapse
        "W̄": X.T @ (y - e_t),
        "b̄": (y - e_t)[0],
        "x̄": (y - e_t) @ W.T,
    }
    for symbol, value in expected.items():
        torch.testing.assert_close(v[symbol], value, rtol=1e-12, atol=1e-12, msg=symbol)


def test_every_gradient_has_the_shape_of_its_value(stages):
    v = {s.symbol: s.value for s in stages}
    for name in ("x", "W", "b", "z", "y", "L"):
        assert v[name + "\u0304"].shape == v[name].shape, name


def test_forward_fills_left_to_right_and_backward_right_to_left(stages):
    forward = [s.column for s in sorted(stages, key=lambda s: s.step) if s.direction == "forward"]
    backward = [s.column for s in sorted(stages, key=lambda s: s.step) if s.direction == "backward"]
    assert forward == sorted(forward) and backward == sorted(backward, reverse=True)
    assert [s.step for s in stages] == sorted(s.step for s in stages)


def test_the_table_lists_every_stage_with_aligned_columns(stages):
    text = cs.table(stages)
    symbols = [ln.split()[1].strip("→←") or ln.split()[2] for ln in text.splitlines() if ln[0].isdigit()]
    assert symbols == [s.symbol for s in stages]
    assert "0.4404,   0.0728,  -0.5132" in text  # z̄ = y − e_t, to four places
    assert cs.table(stages, upto=3).count("\n") < text.count("\n")
    assert "x̄" not in cs.table(stages, upto=7)


def test_the_stepper_moves_within_bounds_and_highlights_the_new_cell(stages):
    state = cs.Stepper(stages)
    state.back()
    assert state.step == 0 and "step 0 of 8" in state.html()
    for _ in range(20):
        state.forward()
    assert state.step == 8 and "<b>x̄</b>" in state.html()
    state.back()
    assert "<b>x̄</b>" not in state.html() and "background:#fff3b0" in state.html()
    state.reset()
    assert state.step == 0 and "<b>z</b>" not in state.html()


def test_the_widget_and_the_figure_build(stages):
    widget = cs.stepper(stages)
    back, step, reset = widget.children[0].children
    view = widget.children[1]
    step.click()
    assert "step 1 of 8" in view.value
    reset.click()
    assert "step 0 of 8" in view.value
    matplotlib.use("Agg")
    fig = cs.figure(stages, upto=5)
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "ȳ = " in texts and "x̄ = " not in texts
    matplotlib.pyplot.close(fig)


def test_bad_inputs_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="class index"):
        cs.stages(X, W, B, 3)
    with pytest.raises(ValueError, match="W of shape"):
        cs.stages(X, W.T, B, 0)
