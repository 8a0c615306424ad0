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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("padding_idx", [0, 6, -1, -11])  # first, inner, last from the end, first from the end
@pytest.mark.parametrize("dim", [6, 1151])  # one column block; more than one
def test_embedding_padding_idx_matches_torch(padding_idx, dim, dtype):
    """The padding row is read by the forward and gets no gradient, as in F.embedding."""
    g = torch.Generator().manual_seed(10)
    weight = torch.randn(11, dim, generator=g, dtype=dtype).to(DEVICE).requires_grad_()
    ids = torch.randint(0, 11, (7, 5), generator=g).to(DEVICE)
    ids[0, :3] = padding_idx % 11  # repeated and scattered
    ids[4, 4] = padding_idx % 11
    y = embedding(weight, ids, padding_idx=padding_idx)
    ref_weight = weight.detach().clone().requires_grad_()
    ref = F.embedding(ids, ref_weight, padding_idx=padding_idx)
    dy = torch.randn(y.shape, generator=g, dtype=dtype).to(DEVICE)
    torch.testing.assert_close(y, ref, rtol=0, atol=0)
    got, want = torch.autograd.grad(y, weight, dy)[0], torch.autograd.grad(ref, ref_weight, dy)[0]
    assert not got[padding_idx].any()
    torch.testing.assert_close(got, want)


def test_scatter_add_skip_leaves_that_row_out():
    src = torch.arange(12.0, device=DEVICE).view(6, 2)
    index = torch.tensor([2, 1, 2, 0, 1, 2], device=DEVICE)
    expected = torch.zeros(3, 2, device=DEVICE).index_add_(0, index, src)
    expected[1] = 0
    torch.testing.assert_close(scatter_add(src, index, 3, skip=1), expected)


@pytest.mark.parametrize("call, error, message", [
    (lambda: embedding(torch.randn(4, 2, device=DEVICE), torch.tensor([0], device=DEVICE), padding_idx=4),
     ValueError, r"padding_idx must be within \[-4, 4\)"),
    (lambda: embedding(torch.randn(4, 2, device=DEVICE), torch.tensor([0], device=DEVICE), padding_idx=-5),
     ValueError, "got -5"),
    (lambda: embedding(torch.randn(4, 2, device=DEVICE), torch.tensor([0], device=DEVICE), padding_idx=1.0),
     TypeError, "padding_idx must be None or an int"),
    (lambda: scatter_add(torch.randn(2, 2, device=DEVICE), torch.tensor([0, 1], device=DEVICE), 3, skip=3),
     ValueError, r"skip must be None or an int in \[0, 3\)"),
])
def test_bad_padding_gets_clear_messages(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("device, dtype", [
    pytest.param("cpu", torch.float16, id="cpu-float16"),
    pytest.param("cuda", torch.bfloat16, id="cuda-bfloat16",
                 marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="autocast on a GPU needs CUDA")),
])
def test_autocast_follows_torch(device, dtype):
    """Under autocast, embedding runs in the table's dtype as F.embedding does, gradients reaching the float32
    table; scatter_add in its source's dtype, as index_add does (on no autocast list; scatter_add's "promote"
    has one float input)."""
    if device != torch.device(DEVICE).type:
        pytest.skip(f"the kernels run on {DEVICE} here")
    g = torch.Generator().manual_seed(11)
    weight = torch.randn(11, 37, generator=g).to(device).requires_grad_()
    ids = torch.randint(0, 11, (7, 5), generator=g).to(device)
    dy = torch.randn(7, 5, 37, generator=g).to(device)
    with torch.autocast(device, dtype=dtype):
        y, yr = embedding(weight, ids, padding_idx=3), F.embedding(ids, weight, padding_idx=3)
        src = dy.reshape(-1, 37).to(dtype)
        added = scatter_add(src, ids.reshape(-1), 11)
        added_ref = torch.zeros(11, 37, dtype=dtype, device=device).index_add(0, ids.reshape(-1), src)
    assert y.dtype == yr.dtype == torch.float32 and added.dtype == added_ref.dtype == dtype
    torch.testing.assert_close(y, yr, rtol=0, atol=0)
    torch.testing.assert_close(added, added_ref, rtol=1e-2, atol=1e-2)
    got, want = torch.autograd.grad(y, weight, dy)[0], torch.autograd.grad(yr, weight, dy)[0]
    torch.testing.assert_close(got, want)
