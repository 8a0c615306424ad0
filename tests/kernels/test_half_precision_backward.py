"""Every kernels op's backward in float16 and bfloat16, held to notebook 08's rule against a float64 reference.

The rule (kernels.precision.backward_tolerance): a gradient stored in ``dtype`` whose reductions of
length n are accumulated in float32 has a norm-wise relative error ‖got − ref‖ / ‖ref‖ of at most

    tol(dtype, n) = 2·u(dtype) + 2·√n·u(float32),   u(float16) = 2^-11, u(bfloat16) = 2^-8, u(float32) = 2^-24

where ref is PyTorch autograd in float64 on the CPU, fed the same half-precision inputs upcast to
float64 (so input rounding is not counted). n is the length of the reduction that produces the
gradient; each test says which. float16 runs everywhere (Triton's interpreter on the CPU);
bfloat16 only on a CUDA GPU: the interpreter holds it as raw integers and its tl.dot multiplies
those (kernels._common.CPU_BFLOAT16_REFUSAL).

The last group shows that the bound is not vacuous: for each op, the float64 gradient with one of
its sums accumulated in bfloat16 (the running sum rounded after every addition, the classic
half-accumulation bug) breaks tol(bfloat16, n), while the same sum accumulated in float32 keeps it.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import course
from kernels import attention, cross_entropy, embedding, fused_linear_cross_entropy, layer_norm, rms_norm, scatter_add, softmax
from kernels.precision import backward_tolerance, relative_error, unit_roundoff

DEVICE = course.DEVICE
NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="bfloat16 needs a CUDA GPU: Triton's interpreter multiplies its raw bits in tl.dot")
HALF_DTYPES = [pytest.param(torch.float16, id="float16"), pytest.param(torch.bfloat16, id="bfloat16", marks=NEEDS_CUDA)]


def rounded(shape, dtype, generator, scale=1.0):
    """Standard normal draws times scale, rounded to dtype, on DEVICE: the inputs both sides share."""
    return (torch.randn(shape, generator=generator) * scale).to(DEVICE, dtype)


def half_leaf(shape, dtype, generator, scale=1.0):
    return rounded(shape, dtype, generator, scale).requires_grad_()


def float64_leaf(t):
    """The same rounded values, exactly, in float64 on the CPU: the reference's input."""
    return t.detach().to("cpu", torch.float64).requires_grad_()


def assert_within_rule(what, got, ref, dtype, n):
    """got (stored in dtype) against the float64 ref, held to tol(dtype, n); the message gives both and their ratio."""
    assert got.dtype == dtype, f"{what} is {got.dtype}, but a {dtype} op must return its gradient in {dtype}"
    err, tol = relative_error(got, ref), backward_tolerance(dtype, n)
    assert err <= tol, f"{what} ({dtype}, n = {n}): ‖got − ref‖/‖ref‖ = {err:.3e} > tol = {tol:.3e} ({err / tol:.2f} × tol)"


# ----------------------------------------------------------------------------- the rule itself


@pytest.mark.parametrize(
    "dtype, u",
    [(torch.float64, 2.0**-53), (torch.float32, 2.0**-24), (torch.float16, 2.0**-11), (torch.bfloat16, 2.0**-8)],
)
def test_unit_roundoff_is_half_an_ulp_of_one(dtype, u):
    assert unit_roundoff(dtype) == u
    # 1 + u is a tie that rounds to even (back to 1); anything past it rounds up.
    assert torch.tensor(1 + u, dtype=torch.float64).to(dtype).item() == 1.0
    assert torch.tensor(1 + 1.5 * u, dtype=torch.float64).to(dtype).item() > 1.0


def test_backward_tolerance_is_output_rounding_plus_a_probabilistic_sum():
    assert backward_tolerance(torch.bfloat16, 1) == 2 * 2.0**-8 + 2 * 2.0**-24
    assert backward_tolerance(torch.float16, 4096) == 2 * 2.0**-11 + 2 * 64 * 2.0**-24  # √4096 = 64 float32 roundoffs
    assert backward_tolerance(torch.float64, 100) == 2 * 2.0**-53 + 2 * 10 * 2.0**-53  # float64 sums in float64
    assert backward_tolerance(torch.float32, 10_000) > backward_tolerance(torch.float32, 100)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: unit_roundoff(torch.int32), TypeError, "dtype must be a torch floating-point dtype"),
        (lambda: unit_roundoff("bfloat16"), TypeError, "got 'bfloat16'"),
        (lambda: backward_tolerance(torch.complex64, 8), TypeError, "dtype must be a torch floating-point dtype"),
        (lambda: backward_tolerance(torch.bfloat16, 0), ValueError, "n must be a positive int"),
        (lambda: backward_tolerance(torch.bfloat16, 2.5), ValueError, "got 2.5"),
        (lambda: backward_tolerance(torch.bfloat16, True), ValueError, "got True"),
        (lambda: relative_error(torch.ones(2), torch.zeros(2)), ValueError, "ref is all zeros"),
        (lambda: relative_error(torch.ones(2), torch.ones(3)), ValueError, r"got has shape \(2,\) but ref has \(3,\)"),
    ],
)
def test_the_rule_refuses_what_it_cannot_measure(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_bfloat16_is_refused_on_the_cpu_with_what_to_use():
    with pytest.raises(TypeError, match="x has dtype bfloat16; .*use float16 or float32 on the CPU"):
        softmax(torch.ones(2, 3, dtype=torch.bfloat16))


# ----------------------------------------------------------------------------- the kernels against the rule


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("shape", [(16, 1000), (2, 9000)])  # one block per row; longer than one block: the walked row
def test_softmax(dtype, shape):
    """x̄ = y ⊙ (ȳ − s) within tol(dtype, N), N the row length (s = ⟨y, ȳ⟩ sums N terms)."""
    g = torch.Generator().manual_seed(0)
    x, dy = half_leaf(shape, dtype, g, scale=3.0), rounded(shape, dtype, g)
    (dx,) = torch.autograd.grad(softmax(x), x, dy)
    xr = float64_leaf(x)
    (ref,) = torch.autograd.grad(torch.softmax(xr, -1), xr, dy.to("cpu", torch.float64))
    assert_within_rule("softmax x̄", dx, ref, dtype, n=shape[-1])


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("shape", [(16, 1000), (3, 9000)])  # a short vocabulary; one longer than a block
def test_cross_entropy(dtype, shape):
    """x̄ = (softmax(x) − onehot(t))/M within tol(dtype, C), C the classes (the forward's lse sums C terms)."""
    g = torch.Generator().manual_seed(1)
    x = half_leaf(shape, dtype, g, scale=3.0)
    target = torch.randint(0, shape[-1], shape[:-1], generator=g)
    target[0] = -100  # an ignored row: out of the mean, zero gradient
    (dx,) = torch.autograd.grad(cross_entropy(x, target.to(DEVICE)), x)
    xr = float64_leaf(x)
    (ref,) = torch.autograd.grad(F.cross_entropy(xr, target), xr)
    assert_within_rule("cross_entropy x̄", dx, ref, dtype, n=shape[-1])


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("shape", [(64, 1000), (8, 8500)])  # the row held whole; past 8192: walked in two passes
def test_layer_norm(dtype, shape):
    """x̄ within tol(dtype, N) (c1 and c2 sum a row of N); w̄ and b̄ within tol(dtype, M) (sums over M rows)."""
    g = torch.Generator().manual_seed(2)
    n_rows, n_cols = shape
    x, w, b = half_leaf(shape, dtype, g, scale=2.0), half_leaf(n_cols, dtype, g), half_leaf(n_cols, dtype, g)
    dy = rounded(shape, dtype, g)
    got = torch.autograd.grad(layer_norm(x, w, b), (x, w, b), dy)
    xr, wr, br = float64_leaf(x), float64_leaf(w), float64_leaf(b)
    ref = torch.autograd.grad(F.layer_norm(xr, (n_cols,), wr, br), (xr, wr, br), dy.to("cpu", torch.float64))
    assert_within_rule("layer_norm x̄", got[0], ref[0], dtype, n=n_cols)
    assert_within_rule("layer_norm w̄", got[1], ref[1], dtype, n=n_rows)
    assert_within_rule("layer_norm b̄", got[2], ref[2], dtype, n=n_rows)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("shape", [(64, 1000), (8, 8500)])
def test_rms_norm(dtype, shape):
    """x̄ within tol(dtype, N) (c1 sums a row of N); w̄ within tol(dtype, M) (a sum over M rows)."""
    g = torch.Generator().manual_seed(3)
    n_rows, n_cols = shape
    x, w, dy = half_leaf(shape, dtype, g), half_leaf(n_cols, dtype, g), rounded(shape, dtype, g)
    got = torch.autograd.grad(rms_norm(x, w), (x, w), dy)
    xr, wr = float64_leaf(x), float64_leaf(w)
    y_ref = xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + 1e-6) * wr
    ref = torch.autograd.grad(y_ref, (xr, wr), dy.to("cpu", torch.float64))
    assert_within_rule("rms_norm x̄", got[0], ref[0], dtype, n=n_cols)
    assert_within_rule("rms_norm w̄", got[1], ref[1], dtype, n=n_rows)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize(
    "shape, causal",
    [
        ((1, 2, 128, 64), False),  # whole tiles
        ((2, 1, 100, 40), True),  # a ragged last tile, a head dim padded to 64, the causal mask
    ],
)
def test_attention(dtype, shape, causal):
    """dQ, dK, dV within tol(dtype, T), T the sequence length: dQ sums over keys, dK and dV over queries
    (the inner products over the head dim, D ≤ T, are shorter).

    The kernels round P to dtype before dV = Pᵀ dO, and dS before dQ = dS k and dK = dSᵀ q (tl.dot
    takes half inputs on tensor cores), and the backward reads O as the forward stored it, in dtype:
    up to three half roundings before the output's own. Measured, they stay within the plain
    bound (about a third of it in float16), so no extra factor is allowed for them.
    """
    g = torch.Generator().manual_seed(4)
    q, k, v = (half_leaf(shape, dtype, g) for _ in range(3))
    do = rounded(shape, dtype, g)
    got = torch.autograd.grad(attention(q, k, v, causal=causal), (q, k, v), do)
    qr, kr, vr = float64_leaf(q), float64_leaf(k), float64_leaf(v)
    o_ref = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal)
    ref = torch.autograd.grad(o_ref, (qr, kr, vr), do.to("cpu", torch.float64))
    for name, got_grad, ref_grad in zip(("dQ", "dK", "dV"), got, ref, strict=True):
        assert_within_rule(f"attention {name}", got_grad, ref_grad, dtype, n=shape[-2])


# Embedding's and scatter_add's sum over repeated rows is a tl.atomic_add into a float32 buffer, rounded to the
# input's dtype once at the end. A row hit a few hundred times is where a half-precision buffer broke the bound
# (about 2.5 × tol in float16 at 4 rows × 1024 tokens, before kernels/scatter_add.py added in float32).
SCATTER_CASES = [
    pytest.param(64, 512, id="64-rows-512-tokens"),  # about 8 repeats a row
    pytest.param(4, 1024, id="4-rows-1024-tokens"),  # about 256 repeats a row
]


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("n_rows, n_tokens", SCATTER_CASES)
@pytest.mark.parametrize("op", ["embedding W̄", "scatter_add"])
def test_sums_over_repeated_rows(op, dtype, n_rows, n_tokens):
    """Each row of the result sums the ȳ rows of its index's occurrences, at most all of them: within
    tol(dtype, tokens). scatter_add is the backward of a gather (x̄ of y = x[index]), embedding's W̄ the same sum."""
    g = torch.Generator().manual_seed(5)
    dy = rounded((n_tokens, 32), dtype, g)
    ids = torch.randint(0, n_rows, (n_tokens,), generator=g)
    ref = torch.zeros(n_rows, 32, dtype=torch.float64).index_add_(0, ids, dy.to("cpu", torch.float64))
    if op == "scatter_add":
        got = scatter_add(dy, ids.to(DEVICE), n_rows)
    else:
        weight = half_leaf((n_rows, 32), dtype, g)
        (got,) = torch.autograd.grad(embedding(weight, ids.to(DEVICE)), weight, dy)
    assert_within_rule(op, got, ref, dtype, n=n_tokens)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_fused_linear_cross_entropy(dtype):
    """h̄ within tol(dtype, V) (h̄ = z̄ W sums over the vocabulary, as the lse does) and W̄ within tol(dtype, T)
    (W̄ = z̄ᵀ h sums over the tokens); the logits' own dot products over d are shorter.

    The op holds each chunk's logits z and their gradient z̄ in dtype, and rounds each chunk's
    W̄ product to dtype before the float32 sum over chunks (kernels/fused_linear_cross_entropy.py,
    Limitations). Measured, these roundings stay within the plain bound, so no extra factor is allowed.
    """
    g = torch.Generator().manual_seed(7)
    n_tokens, dim, vocab = 64, 32, 500
    h, w = half_leaf((n_tokens, dim), dtype, g), half_leaf((vocab, dim), dtype, g, scale=0.3)
    target = torch.randint(0, vocab, (n_tokens,), generator=g)
    target[:3] = -100  # ignored rows: out of the sum and the count
    got = torch.autograd.grad(fused_linear_cross_entropy(h, w, target.to(DEVICE)), (h, w))
    hr, wr = float64_leaf(h), float64_leaf(w)
    ref = torch.autograd.grad(F.cross_entropy(hr @ wr.T, target), (hr, wr))
    assert_within_rule("fused_linear_cross_entropy h̄", got[0], ref[0], dtype, n=vocab)
    assert_within_rule("fused_linear_cross_entropy W̄", got[1], ref[1], dtype, n=n_tokens)


# ----------------------------------------------------------------------------- the bound is not vacuous


def sum_held_in(terms: torch.Tensor, dtype: torch.dtype, dim: int) -> torch.Tensor:
    """Σ terms over dim, term by term, the running sum rounded to dtype after every addition (in float64)."""
    total = torch.zeros_like(terms.select(dim, 0))
    for term in terms.unbind(dim):
        total = (total + term).to(dtype).to(torch.float64)
    return total


def bfloat16_values(shape, generator, scale=1.0):
    """Inputs as a bfloat16 op would get them, in float64."""
    return (torch.randn(shape, generator=generator, dtype=torch.float64) * scale).to(torch.bfloat16).to(torch.float64)


def softmax_with(acc, g):
    """x̄ = y ⊙ (ȳ − s) with s = ⟨y, ȳ⟩ accumulated in acc; n = N = 8192."""
    x, dy = bfloat16_values((8, 8192), g, scale=3.0), bfloat16_values((8, 8192), g)
    y = torch.softmax(x, -1)
    s = (y * dy).sum(-1, keepdim=True) if acc is None else sum_held_in(y * dy, acc, -1).unsqueeze(-1)
    return y * (dy - s), 8192


def cross_entropy_with(acc, g):
    """x̄ = (exp(x − lse) − onehot)/M with lse's Σ exp(x − m) accumulated in acc; n = C = 1000."""
    x = bfloat16_values((16, 1000), g, scale=3.0)
    target = torch.randint(0, 1000, (16,), generator=g)
    m = x.max(-1, keepdim=True).values
    e = torch.exp(x - m)
    ell = e.sum(-1, keepdim=True) if acc is None else sum_held_in(e, acc, -1).unsqueeze(-1)
    return (torch.exp(x - m - torch.log(ell)) - F.one_hot(target, 1000)) / 16, 1000


def norm_weight_grad_with(acc, g, rms):
    """w̄ = Σ_rows ȳ ⊙ x̂ of LayerNorm (or RMSNorm) accumulated in acc over M = 1024 rows; n = M."""
    x, dy = bfloat16_values((1024, 256), g, scale=2.0), bfloat16_values((1024, 256), g)
    xc = x if rms else x - x.mean(-1, keepdim=True)
    xhat = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + 1e-5)
    terms = dy * xhat
    return (terms.sum(0) if acc is None else sum_held_in(terms, acc, 0)), 1024


def attention_dv_with(acc, g):
    """dV = Pᵀ dO accumulated in acc over T = 256 queries; n = T."""
    q, k, do = (bfloat16_values((256, 32), g) for _ in range(3))
    p = torch.softmax(q @ k.T / math.sqrt(32), -1)  # (T queries, T keys)
    terms = p.unsqueeze(-1) * do.unsqueeze(1)  # (queries, keys, D): query i's share of each key's dV
    return (terms.sum(0) if acc is None else sum_held_in(terms, acc, 0)), 256


def embedding_dw_with(acc, g):
    """W̄ rows summed in acc over 1024 tokens drawn from 4 rows; n = tokens. (What half atomics do.)"""
    ids = torch.randint(0, 4, (1024,), generator=g)
    dy = bfloat16_values((1024, 32), g)
    terms = F.one_hot(ids, 4).to(torch.float64).unsqueeze(-1) * dy.unsqueeze(1)  # (tokens, rows, D)
    return (terms.sum(0) if acc is None else sum_held_in(terms, acc, 0)), 1024


def linear_ce_dw_with(acc, g):
    """W̄ = z̄ᵀ h accumulated in acc over T = 512 tokens; n = T."""
    h, w = bfloat16_values((512, 32), g), bfloat16_values((100, 32), g, scale=0.3)
    target = torch.randint(0, 100, (512,), generator=g)
    dz = (torch.softmax(h @ w.T, -1) - F.one_hot(target, 100)) / 512
    terms = dz.unsqueeze(-1) * h.unsqueeze(1)  # (tokens, V, d)
    return (terms.sum(0) if acc is None else sum_held_in(terms, acc, 0)), 512


@pytest.mark.parametrize(
    "gradient_with",
    [
        pytest.param(softmax_with, id="softmax-s"),
        pytest.param(cross_entropy_with, id="cross_entropy-lse"),
        pytest.param(lambda acc, g: norm_weight_grad_with(acc, g, rms=False), id="layer_norm-dgamma"),
        pytest.param(lambda acc, g: norm_weight_grad_with(acc, g, rms=True), id="rms_norm-dgamma"),
        pytest.param(attention_dv_with, id="attention-dV"),
        pytest.param(embedding_dw_with, id="embedding-and-scatter_add-dW"),
        pytest.param(linear_ce_dw_with, id="fused_linear_cross_entropy-dW"),
    ],
)
def test_the_bound_catches_half_accumulation(gradient_with):
    """A sum accumulated in bfloat16 breaks tol(bfloat16, n) by at least half again; accumulated in float32, it keeps it.

    Plain PyTorch on the CPU, float64 everywhere except the one sum; the same seed gives each
    variant the same inputs.
    """
    ref, n = gradient_with(None, torch.Generator().manual_seed(8))
    tol = backward_tolerance(torch.bfloat16, n)
    in_bfloat16, _ = gradient_with(torch.bfloat16, torch.Generator().manual_seed(8))
    in_float32, _ = gradient_with(torch.float32, torch.Generator().manual_seed(8))
    err_half, err_single = relative_error(in_bfloat16, ref), relative_error(in_float32, ref)
    assert err_half > 1.5 * tol, f"accumulated in bfloat16: error {err_half:.3e} ≤ 1.5 × tol = {1.5 * tol:.3e} (n = {n})"
    assert err_single <= tol, f"accumulated in float32: error {err_single:.3e} > tol = {tol:.3e} (n = {n})"
