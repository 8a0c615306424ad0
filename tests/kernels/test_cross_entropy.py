"""kernels.cross_entropy against torch.nn.functional.cross_entropy: value and gradient, ignore_index included."""

import importlib

import pytest
import torch
import torch.nn.functional as F

import course
from kernels import cross_entropy

ce_module = importlib.import_module("kernels.cross_entropy")
DEVICE = course.DEVICE
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def reference(logits, target, reduction, ignore_index):
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction=reduction, ignore_index=ignore_index)
    return flat.reshape(target.shape) if reduction == "none" else flat


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize(
    "shape",
    [
        (1, 781),  # batch 1, odd number of classes
        (7, 1823),  # prime batch, not a power of two
        (2, 3, 5),  # 3-D logits, classes on the last axis
        (3, 10000),  # more classes than one interpreter block
    ],
)
def test_matches_torch(shape, reduction, dtype):
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(shape, generator=g, dtype=dtype) * 4).to(DEVICE).requires_grad_()
    target = torch.randint(0, shape[-1], shape[:-1], generator=g).to(DEVICE)
    target.view(-1)[0] = shape[-1] - 1  # the last class, where a masked tail would hide an off-by-one
    loss = cross_entropy(logits, target, reduction=reduction)
    ref_logits = logits.detach().clone().requires_grad_()
    ref = reference(ref_logits, target, reduction, -100)
    upstream = torch.randn(ref.shape, generator=g, dtype=dtype).to(DEVICE)
    (got_grad,) = torch.autograd.grad(loss, logits, upstream)
    (ref_grad,) = torch.autograd.grad(ref, ref_logits, upstream)
    assert loss.shape == ref.shape
    torch.testing.assert_close(loss, ref, rtol=TOL[dtype], atol=TOL[dtype])
    torch.testing.assert_close(got_grad, ref_grad, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ignore_index_rows_get_no_loss_and_no_gradient(reduction):
    logits = torch.randn(7, 11, dtype=torch.float64, device=DEVICE, requires_grad=True)
    target = torch.tensor([3, -100, 0, 10, -100, 5, 1], device=DEVICE)
    loss = cross_entropy(logits, target, reduction=reduction)
    ref_logits = logits.detach().clone().requires_grad_()
    ref = F.cross_entropy(ref_logits, target, reduction=reduction)
    torch.testing.assert_close(loss, ref)
    loss.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(logits.grad, ref_logits.grad)
    assert logits.grad[1].abs().max() == 0 and logits.grad[4].abs().max() == 0


def test_saturated_softmax_keeps_a_useful_gradient():
    # Wrong class wins by 1000: an unfused log(softmax) would give log(0) = -inf.
    logits = torch.tensor([[1000.0, 0.0, 0.0]], dtype=torch.float64, device=DEVICE, requires_grad=True)
    target = torch.tensor([1], device=DEVICE)
    loss = cross_entropy(logits, target)
    loss.backward()
    assert torch.isfinite(loss) and loss.item() == pytest.approx(1000.0)
    torch.testing.assert_close(logits.grad, torch.tensor([[1.0, -1.0, 0.0]], dtype=torch.float64, device=DEVICE))


def test_forward_saves_one_scalar_per_row_not_the_probabilities():
    logits = torch.randn(5, 300, dtype=torch.float64, device=DEVICE, requires_grad=True)
    target = torch.randint(0, 300, (5,), device=DEVICE)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        cross_entropy(logits, target)
    shapes = sorted(tuple(t.shape) for t in saved)
    assert shapes == [(5,), (5,), (5, 300)], shapes  # lse, target, logits — no (5, 300) probabilities


def test_gradcheck_float64():
    logits = torch.randn(4, 9, dtype=torch.float64, device=DEVICE, requires_grad=True)
    target = torch.tensor([0, 8, 3, -100], device=DEVICE)
    assert torch.autograd.gradcheck(lambda x: cross_entropy(x, target), (logits,), fast_mode=True)


@pytest.mark.parametrize(
    "logits, target, message",
    [
        (torch.randn(3, 4), torch.tensor([0, 1, 4]), r"outside \[0, 4\)"),
        (torch.randn(3, 4), torch.tensor([0.0, 1.0, 2.0]), "integer tensor"),
        (torch.randn(3, 4), torch.tensor([0, 1]), "one class index per row"),
        (torch.randn(3, 0), torch.tensor([0, 1, 2]), "empty last dimension"),
    ],
)
def test_bad_inputs_get_clear_messages(logits, target, message):
    with pytest.raises((TypeError, ValueError), match=message):
        cross_entropy(logits.to(DEVICE), target.to(DEVICE))


def test_bad_reduction_is_refused():
    with pytest.raises(ValueError, match="reduction must be"):
        cross_entropy(torch.randn(2, 3, device=DEVICE), torch.tensor([0, 1], device=DEVICE), reduction="avg")
