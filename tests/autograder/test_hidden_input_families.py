"""Hidden checks that cannot be passed by code that is right only on inputs that look like a check's (issue 27).

Notebook 08's visible checks draw x = 4 + N(0, 1) and ȳ = 32 + N(0, 1); a backward that keeps its statistics in half
precision unless its inputs look like that passes them, and used to pass the hidden checks too. The hidden checks
now draw each half-precision case from a family of ``autograder.inputs.FAMILIES``, every family once per run in an
order the seed picks (``autograder.check.mixed_precision``'s docstring). Here, with fixtures of this file:

- two such backwards (one recognizing the visible checks' means, one any common part of ȳ) fail the hidden checks
  with ``half-accumulation`` on every seed of 0..7 (and of 0..299, measured once), while the visible checks pass
  them — and the notebook's solution and right code pass the hidden checks on the same seeds;
- each family alone (every case of a run drawn from it) makes statistics held in half precision fail and right
  code pass, on every seed of 0..7 — the backwards' and Part E's kernel's;
- values with no reason for a statistic to cancel (ȳ ~ N(0, 1), y of spread 2) leave a statistic held in half
  precision within the bound: why no family is plain N(0, 1) throughout;
- notebook 03's float16 backward case has a common part of ȳ drawn each run, not the visible check's 10.

Cost: about 20 s on one core.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from autograder import inputs
from autograder.check import mixed_precision as hidden
from course.diagnose import relative_error
from course.selfcheck import mixed_precision as visible
from tests.autograder import test_check_mixed_precision as mixed_tests
from tests.autograder import test_check_triton_softmax as triton_tests
from tests.support import diagnosis, failure_of, solution_fixture

pytestmark = pytest.mark.filterwarnings("error")

hidden_03 = importlib.import_module("autograder.check.triton_softmax")  # the package's name is the 03 check itself

F64, F32, BF16, F16 = torch.float64, torch.float32, torch.bfloat16, torch.float16
SEEDS = range(8)
solution = solution_fixture("08_mixed_precision_backward")


# ---------------------------------------------------------------------------
# Fixtures: right code, and the same code with its row statistics rounded to the input's half precision.


def wide(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, F32)


def softmax_right(y, dy, half_stats=False):
    acc = wide(y.dtype)
    y_, dy_ = y.to(acc), dy.to(acc)
    s = (y_ * dy_).sum(-1, keepdim=True)
    if half_stats:
        s = s.to(y.dtype).to(acc)  # the hub held in y's dtype
    return (y_ * (dy_ - s)).to(y.dtype)


def layernorm_right(dy, x, gamma, mean, rstd, half_stats=False):
    acc, n = wide(x.dtype), x.shape[-1]
    r = rstd.to(acc)[..., None]
    xhat = (x.to(acc) - mean.to(acc)[..., None]) * r
    g = dy.to(acc) * gamma.to(acc)
    c1, c2 = (g * xhat).mean(-1, keepdim=True), g.mean(-1, keepdim=True)
    if half_stats:
        c1, c2 = (c.to(x.dtype).to(acc) for c in (c1, c2))  # the row statistics held in x's dtype
    rows = dy.to(acc).reshape(-1, n)
    dgamma = (rows * xhat.reshape(-1, n)).sum(0)  # the sums over rows stay right: only dx's statistics are the bug
    return (r * (g - c2 - xhat * c1)).to(x.dtype), dgamma.to(gamma.dtype), rows.sum(0).to(gamma.dtype)


def softmax_half_stats(y, dy):
    return softmax_right(y, dy, half_stats=y.dtype in visible.HALF)


def layernorm_half_stats(dy, x, gamma, mean, rstd):
    return layernorm_right(dy, x, gamma, mean, rstd, half_stats=x.dtype in visible.HALF)


# Two ways to tell a check's inputs: the held-out attack's (ȳ's mean near 32, x's near 4), and a broader one that
# also knows today's hidden cases give ȳ a common part (every row's mean far above its spread).


def like_the_visible_checks(dy, x=None) -> bool:
    near_32 = abs(float(dy.double().mean()) - visible.OFFSET) < 4
    return near_32 and (x is None or abs(float(x.double().mean()) - 4) < 1)


def with_a_common_part(dy, x=None) -> bool:
    d = dy.double()
    return bool((d.mean(-1).abs() > 4 * d.std(-1)).all())


def right_only_when(looks_like):
    def softmax(y, dy):
        return softmax_right(y, dy, half_stats=y.dtype in visible.HALF and not looks_like(dy))

    def layernorm(dy, x, gamma, mean, rstd):
        return layernorm_right(dy, x, gamma, mean, rstd, half_stats=x.dtype in visible.HALF and not looks_like(dy, x))

    return {"softmax_backward_mixed": softmax, "layernorm_backward_mixed": layernorm}


OBSERVED = {"like_the_visible_checks": right_only_when(like_the_visible_checks),
            "with_a_common_part": right_only_when(with_a_common_part)}
BACKWARDS = ("softmax_backward_mixed", "layernorm_backward_mixed")


# ---------------------------------------------------------------------------
# Right only when observed


@pytest.mark.parametrize("gate", OBSERVED)
@pytest.mark.parametrize("name", BACKWARDS)
def test_code_right_only_on_the_checks_inputs_fails_the_hidden_check_on_every_seed(name, gate, monkeypatch, capsys):
    fn = OBSERVED[gate][name]
    getattr(visible, name)(fn)  # it is what it pretends on the visible checks' inputs...
    assert capsys.readouterr().out.startswith(f"✓ {name} passes the visible checks")
    for seed in SEEDS:  # ...and not on the hidden ones, whatever the seed
        monkeypatch.setenv("AUTOGRADER_SEED", str(seed))
        failure = failure_of(getattr(hidden, name), fn)
        assert failure.cls == "half-accumulation", (seed, str(failure))


@pytest.mark.parametrize("name", BACKWARDS)
def test_the_solution_and_right_code_pass_the_hidden_check_on_the_same_seeds(name, solution, monkeypatch):
    right = {"softmax_backward_mixed": softmax_right, "layernorm_backward_mixed": layernorm_right}[name]
    for seed in SEEDS:
        monkeypatch.setenv("AUTOGRADER_SEED", str(seed))
        getattr(hidden, name)(solution[name])
        getattr(hidden, name)(right)


# ---------------------------------------------------------------------------
# Each family makes the check mean something


@pytest.mark.parametrize("family", inputs.FAMILIES)
@pytest.mark.parametrize("name", BACKWARDS)
def test_each_family_alone_fails_half_statistics_and_passes_right_code(name, family, monkeypatch):
    monkeypatch.setattr(hidden, "family_order", lambda gen, k: [family] * k)
    half_stats = {"softmax_backward_mixed": softmax_half_stats, "layernorm_backward_mixed": layernorm_half_stats}
    right = {"softmax_backward_mixed": softmax_right, "layernorm_backward_mixed": layernorm_right}
    for seed in SEEDS:
        monkeypatch.setenv("AUTOGRADER_SEED", str(seed))
        assert diagnosis(getattr(hidden, name), half_stats[name]) == "half-accumulation", (family, seed)
        getattr(hidden, name)(right[name])


@pytest.mark.parametrize("family", inputs.FAMILIES)
def test_each_family_alone_fails_a_half_accumulating_kernel_and_passes_the_right_one(family, monkeypatch,
                                                                                     tmp_path_factory):
    kernels = mixed_tests.kernels.__wrapped__(tmp_path_factory)  # test_check_mixed_precision's kernels
    monkeypatch.setattr(hidden, "family_order", lambda gen, k: [family] * k)
    for seed in range(3):  # Triton's interpreter: three seeds, not eight
        monkeypatch.setenv("AUTOGRADER_SEED", str(seed))
        assert diagnosis(hidden.softmax_bwd_mixed_kernel, kernels["half_accumulator"]) == "half-accumulation"
        hidden.softmax_bwd_mixed_kernel(kernels["right"])


def test_without_a_reason_to_cancel_half_statistics_are_within_the_bound():
    """ȳ ~ N(0, 1) and y of spread 2: s is small against ȳ − s, and its rounding is well inside tol. A family of
    such values alone would let statistics held in half precision pass, so none is."""
    gen = torch.Generator().manual_seed(27)
    for dtype, rows, n in hidden.SOFTMAX_HALF:
        case = visible.softmax_half_case(gen, dtype, rows, n, offset=0.0)
        assert relative_error(softmax_half_stats(*case.args), case.expected[0]) < hidden.SOFTMAX_RULE.bound(case, 0)


# ---------------------------------------------------------------------------
# The families themselves


def test_every_run_meets_every_family_in_an_order_the_seed_picks():
    orders = set()
    for seed in range(20):
        order = inputs.family_order(torch.Generator().manual_seed(seed), 6)
        assert sorted(order[:4]) == sorted(inputs.FAMILIES) and len(set(order[4:])) == 2, order
        assert order == inputs.family_order(torch.Generator().manual_seed(seed), 6)  # --seed replays it
        orders.add(tuple(order))
    assert len(orders) > 10


def test_the_families_are_what_they_say():
    gen = torch.Generator().manual_seed(0)
    values = {f: inputs.activations(gen, f, 64, 640) for f in inputs.FAMILIES}
    assert all(v.shape == (64, 640) and v.dtype == F64 for v in values.values())
    assert values["normal"].mean().abs() < 0.05 and (values["normal"].std() - 1).abs() < 0.05
    row_means = values["shifted"].mean(-1).abs()
    assert bool(((row_means > 3.5) & (row_means < 16.5)).all())  # a common part of 4 to 16 a row, either sign
    assert bool((values["shifted"].mean(-1) > 0).any() and (values["shifted"].mean(-1) < 0).any())
    assert values["heavy"].abs().max() > 10 and values["heavy"].abs().max() <= inputs.HEAVY_MAX
    column_size = values["outliers"].abs().mean(0)
    assert int((column_size > 10).sum()) == 640 // 64  # the outlier columns, the same in every row
    with pytest.raises(ValueError, match="no family of activations named 'uniform'"):
        inputs.activations(gen, "uniform", 3)


def test_a_seed_replays_the_hidden_cases(monkeypatch):
    """The same AUTOGRADER_SEED gives the same failure, to the digit; another seed other inputs."""
    sentences = []
    for seed in (5, 5, 6):
        monkeypatch.setenv("AUTOGRADER_SEED", str(seed))
        sentences.append(failure_of(hidden.softmax_backward_mixed, softmax_half_stats).sentence)
    assert sentences[0] == sentences[1] != sentences[2]


# ---------------------------------------------------------------------------
# Notebook 03: the float16 backward case


def test_notebook_03s_float16_backward_has_a_common_part_of_its_own_each_run(monkeypatch):
    offsets = []
    for seed in SEEDS:
        case = hidden_03.half_backward(torch.Generator().manual_seed(seed), 3, 301)
        dy = case.inputs[0]
        offsets.append(float(dy.mean()))
        assert hidden_03.HALF_COMMON[0] - 0.5 < abs(offsets[-1]) < hidden_03.HALF_COMMON[1] + 0.5
    assert min(offsets) < 0 < max(offsets) and sum(abs(abs(o) - 10) < 1 for o in offsets) <= 2, offsets
    right = triton_tests.variant("solution", {})["softmax_bwd_kernel"]
    wrong = triton_tests.MORE_BUGS["float16 hub"]
    wrong = triton_tests.variant("float16 hub", wrong[1])["softmax_bwd_kernel"]
    for seed in range(3):
        monkeypatch.setenv("AUTOGRADER_SEED", str(seed))
        hidden_03.softmax_bwd_kernel(right)
        failure = failure_of(hidden_03.softmax_bwd_kernel, wrong)
        assert failure.cls == "half-accumulation" and "s ≈ " in failure.sentence, str(failure)
