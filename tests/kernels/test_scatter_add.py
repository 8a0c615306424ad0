"""kernels.scatter_add and kernels.embedding against index_add_ and F.embedding, repeats included."""

import pytest
import torch
import torch.nn.functional as F

import course
from kernels import embedding, scatter_add

DEVICE = course.DEVICE


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "rows, n, dim",
    [
        (1, 5, 3),  # batch 1
        (7, 4, 33),  # prime batch, more rows than slots: repeats are certain
        (50, 50, 1),  # D = 1
        (9, 3, 2100),  # rows wider than one column block
    ],
)
def test_scatter_add_matches_index_add(rows, n, dim, dtype):
    g = torch.Generator().manual_seed(4)
    src = torch.randn(rows, dim, generator=g, dtype=dtype).to(DEVICE)
    index = torch.randint(0, n, (rows,), generator=g).to(DEVICE)
    index[-1] = n - 1  # the last slot, where an off-by-one hides
    expected = torch.zeros(n, dim, dtype=dtype, device=DEVICE).index_add_(0, index, src)
    torch.testing.assert_close(scatter_add(src, index, n), expected)


def test_repeated_indices_add_every_contribution():
    src = torch.ones(6, 2, device=DEVICE)
    index = torch.tensor([2, 2, 2, 0, 2, 0], device=DEVICE)
    out = scatter_add(src, index, 3)
    torch.testing.assert_close(out, torch.tensor([[2.0, 2.0], [0.0, 0.0], [4.0, 4.0]], device=DEVICE))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ids_shape", [(1,), (7,), (7, 5)])  # batch 1, batch 7, (batch, tokens)
def test_embedding_matches_torch(ids_shape, dtype):
    g = torch.Generator().manual_seed(5)
    weight = torch.randn(11, 6, generator=g, dtype=dtype).to(DEVICE).requires_grad_()
    ids = torch.randint(0, 11, ids_shape, generator=g).to(DEVICE)
    ids.view(-1)[0] = 10
    if ids.numel() > 1:
        ids.view(-1)[1] = 10  # out of order, repeated
    y = embedding(weight, ids)
    ref_weight = weight.detach().clone().requires_grad_()
    ref = F.embedding(ids, ref_weight)
    dy = torch.randn(y.shape, generator=g, dtype=dtype).to(DEVICE)
    torch.testing.assert_close(y, ref)
    torch.testing.assert_close(torch.autograd.grad(y, weight, dy)[0], torch.autograd.grad(ref, ref_weight, dy)[0])


def test_gradcheck_float64():
    weight = torch.randn(5, 3, dtype=torch.float64, device=DEVICE, requires_grad=True)
    ids = torch.tensor([[4, 0, 4], [1, 1, 4]], device=DEVICE)
    assert torch.autograd.gradcheck(lambda w: embedding(w, ids), (weight,), fast_mode=True)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: embedding(torch.randn(4, 2, device=DEVICE), torch.tensor([0, 4], device=DEVICE)),
         IndexError, r"holds 4, outside \[0, 4\)"),
        (lambda: embedding(torch.randn(4, 2, device=DEVICE), torch.tensor([-1], device=DEVICE)), IndexError, "holds -1"),
        (lambda: scatter_add(torch.randn(3, 2, device=DEVICE), torch.tensor([0, 1], device=DEVICE), 4),
         ValueError, "2 entries but there are 3 rows"),
        (lambda: scatter_add(torch.randn(3, 2, device=DEVICE), torch.tensor([0.0, 1.0, 2.0], device=DEVICE), 4),
         TypeError, "integer tensor"),
        (lambda: scatter_add(torch.randn(3, device=DEVICE), torch.tensor([0, 1, 2], device=DEVICE), 4), ValueError, r"\(rows, D\)"),
    ],
)
def test_bad_inputs_get_clear_messages(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="contention between programs only happens on a GPU")
def test_heavy_contention_on_gpu():
    src = torch.randn(100000, 64, device="cuda", dtype=torch.float64)
    index = torch.randint(0, 3, (100000,), device="cuda")
    expected = torch.zeros(3, 64, dtype=torch.float64, device="cuda").index_add_(0, index, src)
    torch.testing.assert_close(scatter_add(src, index, 3), expected, rtol=1e-9, atol=1e-9)
