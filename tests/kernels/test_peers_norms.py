"""The peers' own test cases for layer_norm, rms_norm, softmax and embedding, run against ``kernels``.

Each test below is one upstream test: its parameter grid, its reference and its tolerances, adapted only
in how the op is called (``kernels.<op>`` instead of the peer's module or function) and in the device
(course.DEVICE: Triton's interpreter on the CPU), and on the CPU in the token counts: rms_norm's sequence
length is cut to 16 and the tutorial's 1151 rows to 151 (the hidden sizes, which set the kernels' blocks,
stay). Where it comes from:

- Liger-Kernel (github.com/linkedin/Liger-Kernel), test/transformers/:
  test_layer_norm.py at 078e932b, test_rms_norm.py at af35a6cf, test_softmax.py at f61b2dfa (the shapes past
  one block, 70000 columns, and the large-row-offset test from its later version 1de3849b),
  test_embedding.py at da1e92d8 (upstream marks it skipped, "LigerEmbedding is under experimentation";
  its cases run here).
- Triton (github.com/triton-lang/triton), python/tutorials/05-layer-norm.py at 54569929: test_layer_norm,
  called there as test_layer_norm(1151, 8192, torch.float16).

Upstream's LlamaRMSNorm reference is written here as BaseRMSNorm with its float32 cast (the same
operations). What the adaptation leaves out, each said where it happens: bfloat16 on the CPU (skipped as upstream skips it
where the device lacks bfloat16: the interpreter has none); Liger's rms_norm ``casting_mode`` and
``in_place`` (every case runs; kernels.rms_norm has one casting rule, float32 statistics rounded once, and
never writes x̄ over ȳ, so neither changes what is compared); Liger's "functional" tests compare two Liger
entry points with each other, so here the exported function is compared with its autograd Function.
One reference changes on the CPU, said in place: the Triton tutorial's float16 layer_norm, whose PyTorch
reference sums its parameter gradients in float16 on the CPU (in float32 on CUDA, where upstream runs it).
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import course
from kernels import embedding, layer_norm, rms_norm, softmax
from kernels.layer_norm import LayerNormFunction
from kernels.rms_norm import RMSNormFunction

DEVICE = course.DEVICE
# Liger's supports_bfloat16(): the device has bfloat16; Triton's interpreter does not.
NO_BF16 = pytest.mark.skipif(torch.device(DEVICE).type != "cuda", reason="bfloat16 does not run in Triton's CPU interpreter")


def tokens(n: int, cpu_max: int) -> int:
    """An upstream token count, cut to ``cpu_max`` in the interpreter (every row is a Python-level step there)."""
    return n if torch.device(DEVICE).type == "cuda" else min(n, cpu_max)


def bf16(atol, rtol):
    return pytest.param(torch.bfloat16, atol, rtol, marks=NO_BF16)


def assert_verbose_allclose(got, want, atol, rtol):
    """Liger's test.utils.assert_verbose_allclose: |got − want| ≤ atol + rtol·|want| everywhere, no NaN or inf."""
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol, check_dtype=False)


# ----------------------------------------------------------------------------- Liger: test_layer_norm.py


@pytest.mark.parametrize("batch_size, seq_len, hidden_size", [(2, 8, 64), (4, 16, 128), (1, 1, 1023), (3, 7, 256)])
@pytest.mark.parametrize("dtype, atol, rtol", [(torch.float32, 1e-5, 1e-5)])
def test_liger_layer_norm(batch_size, seq_len, hidden_size, dtype, atol, rtol):
    torch.manual_seed(0)
    x = torch.randn(batch_size, seq_len, hidden_size, dtype=dtype, device=DEVICE)
    ours_x, torch_x = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    torch_ln = nn.LayerNorm(hidden_size, eps=1e-6).to(dtype).to(DEVICE)
    # LigerLayerNorm's parameters, copied into torch's: a weight of ones and a bias of zeros.
    weight = torch_ln.weight.detach().clone().requires_grad_(True)
    bias = torch_ln.bias.detach().clone().requires_grad_(True)
    ours = layer_norm(ours_x, weight, bias, 1e-6)
    ref = torch_ln(torch_x)
    assert torch.allclose(ours, ref, atol=atol, rtol=rtol)
    grad_output = torch.randn_like(x)
    ours.backward(grad_output, retain_graph=True)
    ref.backward(grad_output, retain_graph=True)
    assert torch.allclose(ours_x.grad, torch_x.grad, atol=atol, rtol=rtol)
    assert torch.allclose(weight.grad, torch_ln.weight.grad, atol=atol, rtol=rtol)
    assert torch.allclose(bias.grad, torch_ln.bias.grad, atol=atol, rtol=rtol)


@pytest.mark.parametrize("batch_size, seq_len, hidden_size", [(2, 8, 64), (4, 16, 128)])
@pytest.mark.parametrize("dtype, atol, rtol", [(torch.float32, 1e-5, 1e-5)])
def test_liger_layer_norm_functional(hidden_size, batch_size, seq_len, dtype, atol, rtol):
    torch.manual_seed(0)
    input = torch.randn(batch_size, seq_len, hidden_size, dtype=dtype, device=DEVICE)
    x1, x2 = input.clone().requires_grad_(True), input.clone().requires_grad_(True)
    w = torch.randn(hidden_size, device=DEVICE, dtype=dtype)
    w1, w2 = w.clone().requires_grad_(True), w.clone().requires_grad_(True)
    b = torch.randn(hidden_size, device=DEVICE, dtype=dtype)
    b1, b2 = b.clone().requires_grad_(True), b.clone().requires_grad_(True)
    y1 = layer_norm(x1, w1, b1, 1e-6)
    y2 = LayerNormFunction.apply(x2, w2, b2, 1e-6)
    assert torch.allclose(y1, y2, atol=atol, rtol=rtol)
    grad_output = torch.randn_like(y2)
    y1.backward(grad_output, retain_graph=True)
    y2.backward(grad_output, retain_graph=True)
    assert torch.allclose(x1.grad, x2.grad, atol=atol, rtol=rtol)
    assert torch.allclose(w1.grad, w2.grad, atol=atol, rtol=rtol)
    assert torch.allclose(b1.grad, b2.grad, atol=atol, rtol=rtol)


# ----------------------------------------------------------------------------- Liger: test_rms_norm.py


class BaseRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = self.upcast(hidden_states)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

    def upcast(self, hidden_states):
        return hidden_states


class LlamaRMSNorm(BaseRMSNorm):
    """Upstream's LlamaRMSNorm (transformers' modeling_llama): BaseRMSNorm, computed in float32."""

    def upcast(self, hidden_states):
        return hidden_states.to(torch.float32)


class GemmaRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


@pytest.mark.parametrize("bs, sl, hd", [(2, 128, 512), (5, 123, 123)])
@pytest.mark.parametrize("dtype, atol, rtol", [(torch.float32, 1e-4, 1e-6), bf16(2e-1, 2e-2)])
@pytest.mark.parametrize("reference, offset, casting_mode",
                         [(LlamaRMSNorm, 0.0, "llama"), (GemmaRMSNorm, 1.0, "gemma"), (BaseRMSNorm, 0.0, "none")])
@pytest.mark.parametrize("in_place", [True, False])
def test_correctness(bs, sl, hd, dtype, atol, rtol, reference, offset, casting_mode, in_place):
    torch.manual_seed(42)
    sl = tokens(sl, 16)
    _tensor = torch.randn(bs, sl, hd, device=DEVICE, dtype=dtype)
    h1, h2 = _tensor.clone().requires_grad_(True), _tensor.clone().requires_grad_(True)
    do = torch.randn(bs, sl, hd, device=DEVICE, dtype=dtype)
    ref_rms = reference(hidden_size=hd).to(DEVICE).to(dtype)
    ref_o = ref_rms(h1)
    ref_o.backward(do, retain_graph=True)
    # LigerRMSNorm(hidden_size=hd, offset=offset, casting_mode=casting_mode, in_place=in_place): a weight of
    # ones; casting_mode and in_place have no counterpart (see the module docstring).
    weight = torch.ones(hd, device=DEVICE, dtype=dtype, requires_grad=True)
    triton_o = rms_norm(h2, weight, 1e-6, offset=offset)
    triton_o.backward(do, retain_graph=True)
    assert_verbose_allclose(ref_o, triton_o, atol=atol, rtol=rtol)
    assert_verbose_allclose(ref_rms.weight.grad, weight.grad, atol=atol, rtol=rtol)
    assert_verbose_allclose(h1.grad, h2.grad, atol=atol, rtol=rtol)


@pytest.mark.parametrize("bs, sl, hd", [(2, 2, 8), (9, 7, 41)])
@pytest.mark.parametrize("dtype, atol, rtol", [(torch.float32, 1e-4, 1e-6), bf16(2e-1, 2e-2)])
@pytest.mark.parametrize("reference, offset, casting_mode", [(LlamaRMSNorm, 0.0, "llama"), (GemmaRMSNorm, 1.0, "gemma")])
def test_correctness_functional(bs, sl, hd, dtype, atol, rtol, reference, offset, casting_mode):
    torch.manual_seed(42)
    _tensor = torch.randn(bs, sl, hd, device=DEVICE, dtype=dtype)
    h1, h2 = _tensor.clone().requires_grad_(True), _tensor.clone().requires_grad_(True)
    w = torch.randn(hd, device=DEVICE, dtype=dtype)
    y1 = rms_norm(h1, w, 1e-6, offset=offset)
    y2 = RMSNormFunction.apply(h2, w, 1e-6, offset)
    assert torch.allclose(y1, y2, atol=atol, rtol=rtol)
    grad = torch.randn_like(y2)
    y1.backward(grad)
    y2.backward(grad)
    assert torch.allclose(h1.grad, h2.grad, atol=atol, rtol=rtol)


# ----------------------------------------------------------------------------- Liger: test_softmax.py

SOFTMAX_SHAPES = [
    (2, 8),
    (4, 16),
    (1, 1023),  # large single row single-block dispatch
    (3, 7, 256),  # 3D input
    (1, 4096),
    (1, 2, 4096),
    (2, 70000),  # past one block: the looped kernel (Liger 1de3849b)
    (1, 3, 70000),
]
SOFTMAX_DTYPES = [(torch.float32, 1e-5, 1e-5), bf16(5e-2, 5e-2)]


@pytest.mark.parametrize("functional", [False, True], ids=["test_liger_softmax", "test_liger_softmax_functional"])
@pytest.mark.parametrize("shape", SOFTMAX_SHAPES)
@pytest.mark.parametrize("dtype, atol, rtol", SOFTMAX_DTYPES)
def test_liger_softmax(functional, shape, dtype, atol, rtol):
    """Upstream's two tests, one against nn.Softmax(dim=-1), one against F.softmax: the same grid."""
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=dtype, device=DEVICE)
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    ref_out = F.softmax(x1, dim=-1) if functional else nn.Softmax(dim=-1)(x1)
    ours = softmax(x2)
    assert_verbose_allclose(ref_out, ours, atol=atol, rtol=rtol)
    grad_output = torch.randn_like(ref_out)
    ref_out.backward(grad_output, retain_graph=True)
    ours.backward(grad_output, retain_graph=True)
    assert_verbose_allclose(x1.grad, x2.grad, atol=atol, rtol=rtol)


OVERFLOW_ROWS, OVERFLOW_COLS = 2**16 + 16, 2**15


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.mem_get_info()[0] < 4 * OVERFLOW_ROWS * OVERFLOW_COLS * 2,
                    reason="requires CUDA and 17.2 GB of free memory for rows beyond the int32 offset range")
def test_softmax_large_row_offset():
    """Forward and backward must address rows whose offset exceeds 2^31 elements (Liger 1de3849b)."""
    x = torch.zeros(OVERFLOW_ROWS, OVERFLOW_COLS, dtype=torch.bfloat16, device="cuda")
    x[-1] = torch.randn(OVERFLOW_COLS, dtype=torch.bfloat16, device="cuda")
    x.requires_grad_(True)
    y = softmax(x)
    grad_output = torch.zeros_like(y)
    grad_output[-1] = torch.randn(OVERFLOW_COLS, dtype=torch.bfloat16, device="cuda")
    y.backward(grad_output)
    x_ref = x[-1].detach().float().requires_grad_(True)
    y_ref = torch.softmax(x_ref, dim=-1)
    y_ref.backward(grad_output[-1].float())
    assert_verbose_allclose(y[-1].float(), y_ref, atol=5e-2, rtol=5e-2)
    assert_verbose_allclose(x.grad[-1].float(), x_ref.grad, atol=5e-2, rtol=5e-2)


# ----------------------------------------------------------------------------- Liger: test_embedding.py


@pytest.mark.parametrize("num_embeddings, embedding_dim, padding_idx", [
    (100, 64, None),
    (100, 64, None),
    (1000, 128, None),
    (100, 60, None),
    (100, 60, None),
    (1000, 120, None),
    (1000, 500, None),
    (30522, 768, None),
    (100, 64, 0),
    (1000, 128, 50),
    (30522, 768, 1),
])
@pytest.mark.parametrize("dtype, atol, rtol", [(torch.float32, 1e-6, 1e-5)])
def test_embedding_correctness(num_embeddings, embedding_dim, padding_idx, dtype, atol, rtol):
    torch.manual_seed(42)
    torch_embedding = nn.Embedding(num_embeddings, embedding_dim, padding_idx=padding_idx).to(dtype).to(DEVICE)
    weight = torch_embedding.weight.detach().clone().requires_grad_(True)  # LigerEmbedding's copy of the table
    input_ids = torch.randint(0, num_embeddings, (32 * 10,), device=DEVICE)
    if padding_idx is not None:
        input_ids[torch.randint(0, 32 * 10, (32 * 10 // 10,))] = padding_idx
    torch_output = torch_embedding(input_ids).view(32, 10, -1)
    ours = embedding(weight, input_ids, padding_idx=padding_idx).view(32, 10, -1)
    assert torch.allclose(torch_output, ours, atol=atol, rtol=rtol)
    grad_output = torch.randn_like(torch_output)
    torch_output.backward(grad_output)
    ours.backward(grad_output)
    assert torch.allclose(torch_embedding.weight.grad, weight.grad, atol=atol, rtol=rtol)


# ----------------------------------------------------------------------------- Triton: tutorials/05-layer-norm.py


@pytest.mark.parametrize("M, N, dtype", [(1151, 8192, torch.float16)])
def test_layer_norm(M, N, dtype, eps=1e-5):
    torch.manual_seed(0)
    x_shape = (tokens(M, 151), N)
    w_shape = (x_shape[-1],)
    weight = torch.rand(w_shape, dtype=dtype, device=DEVICE, requires_grad=True)
    bias = torch.rand(w_shape, dtype=dtype, device=DEVICE, requires_grad=True)
    x = -2.3 + 0.5 * torch.randn(x_shape, dtype=dtype, device=DEVICE)
    dy = .1 * torch.randn_like(x)
    x.requires_grad_(True)
    y_tri = layer_norm(x, weight, bias, eps)
    # The tutorial's reference is PyTorch's CUDA layer_norm, which sums w̄ and b̄ in float32. Its CPU float16
    # backward does not: over 1151 rows its b̄ is 0.06 off the float64 sum (kernels': 0.004), past 1e-2.
    # So on the CPU the reference runs in float32 on the same float16 values and is rounded to float16.
    ref_dtype = torch.float32 if torch.device(DEVICE).type == "cpu" else dtype
    y_ref = F.layer_norm(x.to(ref_dtype), w_shape, weight.to(ref_dtype), bias.to(ref_dtype), eps).to(dtype)
    y_tri.backward(dy, retain_graph=True)
    dx_tri, dw_tri, db_tri = [_.grad.clone() for _ in [x, weight, bias]]
    x.grad, weight.grad, bias.grad = None, None, None
    y_ref.backward(dy, retain_graph=True)
    dx_ref, dw_ref, db_ref = [_.grad.clone() for _ in [x, weight, bias]]
    assert torch.allclose(y_tri, y_ref, atol=1e-2, rtol=0)
    assert torch.allclose(dx_tri, dx_ref, atol=1e-2, rtol=0)
    assert torch.allclose(db_tri, db_ref, atol=1e-2, rtol=0)
    assert torch.allclose(dw_tri, dw_ref, atol=1e-2, rtol=0)
