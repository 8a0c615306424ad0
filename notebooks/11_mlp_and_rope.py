# %% [markdown]
# # 11 · The MLP's activations and rotary embeddings
#
# After attention, the kernels a transformer engineer fuses most are the MLP's gated activation and the rotary
# position embedding. Both are elementwise, or nearly: every output element depends on one or two input elements.
# Their backwards are short, and each teaches one thing the course has not shown yet. For the gated MLP, the
# backward needs the pre-activations again: saving them costs memory, and recomputing them costs FLOPs. For RoPE,
# the Jacobian of a rotation is a rotation, so the backward needs no new code at all once you see which one.
#
# | part | you write | points |
# |---|---|---|
# | A | `gelu_backward(x, dy, approximate="none")` — GELU's VJP, exact (erf) and tanh-approximated | 2 |
# | B | `swiglu_backward(a, b, dh) -> (da, db)` — the VJP of $h = \operatorname{silu}(a) \odot b$ | 2 |
# | C | `swiglu_bwd_kernel` — `@triton.jit`: ā and b̄ from a, b and h̄, read once, one block of a row per program | 3 |
# | D | `rope_backward(dy, cos, sin, interleaved=False)` — RoPE's VJP, both layouts | 2 |
# | E | `rope_kernel` — `@triton.jit`: RoPE for one row per program, forward and backward from one code | 3 |
#
# **Notation.** $\bar t$ (in code `dt`) is the gradient of the loss with respect to $t$, with the shape of $t$.
# $\sigma$ is the logistic sigmoid, $\operatorname{silu}(a) = a\,\sigma(a)$, $\Phi$ and $\varphi$ the standard normal
# CDF and density.
# %%
import course

# %% [markdown]
# **The given cell** holds what you do not write: RoPE's forward in PyTorch, the launchers of your two kernels, and
# the dtype the kernels compute in.
# %%
import math

import torch

import triton
import triton.language as tl

DEVICE = course.DEVICE  # cuda with a GPU; else cpu, with the kernels in Triton's interpreter
F64 = torch.float64
SWIGLU_BLOCK = 64  # columns of a row per program in swiglu_bwd_kernel's launches here (a GPU wants 1024 or more)


def cdiv(a, b):
    return (a + b - 1) // b


def rope_angles(T, D, base=10000.0, dtype=F64, device=DEVICE):
    """cos θ and sin θ, each (T, D/2): θ[t, i] = t · base^(−2i/D), the angle of pair i at position t."""
    inv_freq = base ** (-torch.arange(0, D, 2, dtype=F64, device=device) / D)  # (D/2,)
    theta = torch.arange(T, dtype=F64, device=device)[:, None] * inv_freq[None, :]  # (T, D/2)
    return theta.cos().to(dtype), theta.sin().to(dtype)


def rope_pairs(x, interleaved):
    """The two halves of every rotated pair of x (..., D): (x[..., 0::2], x[..., 1::2]) when interleaved (GPT-J),
    else (x[..., :D/2], x[..., D/2:]) (GPT-NeoX, Llama)."""
    if interleaved:
        return x[..., 0::2], x[..., 1::2]
    half = x.shape[-1] // 2
    return x[..., :half], x[..., half:]


def rope_join(y1, y2, interleaved):
    """rope_pairs' inverse: the (..., D) tensor whose pairs are (y1, y2)."""
    if interleaved:
        return torch.stack((y1, y2), dim=-1).flatten(-2)
    return torch.cat((y1, y2), dim=-1)


def rope_forward(x, cos, sin, interleaved=False):
    """Given: y = RoPE(x) for x (..., T, D), cos and sin (T, D/2): pair i at position t turned by θ[t, i]."""
    x1, x2 = rope_pairs(x, interleaved)
    return rope_join(x1 * cos - x2 * sin, x2 * cos + x1 * sin, interleaved)


def compute_dtype(dtype):
    """The dtype the kernels compute in: float64 for float64 inputs, else float32 (half inputs too)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def swiglu_bwd(a, b, dh, block=SWIGLU_BLOCK):
    """Given: (da, db) for a, b, dh of shape (..., F) by swiglu_bwd_kernel; each in a's dtype."""
    F_ = a.shape[-1]
    a2, b2, dh2 = (t.reshape(-1, F_) for t in (a, b, dh))  # (rows, F): the last dim keeps stride 1
    da, db = torch.empty_like(a2), torch.empty_like(b2)
    swiglu_bwd_kernel[(a2.shape[0], cdiv(F_, block))](
        a2, b2, dh2, da, db, F_, a2.stride(0), b2.stride(0), dh2.stride(0), da.stride(0), db.stride(0),
        BLOCK=block)
    return da.view(a.shape), db.view(b.shape)


def rope_apply(x, cos, sin, interleaved=False, backward=False):
    """Given: RoPE of x (..., T, D) by rope_kernel, one (…, t) row per program; with backward=True, the launch the
    backward makes (x is then ȳ)."""
    T, D = x.shape[-2:]
    x2 = x.reshape(-1, D)  # (rows, D): row r is position r % T
    y = torch.empty_like(x2)
    cos, sin = cos.contiguous(), sin.contiguous()
    rope_kernel[(x2.shape[0],)](
        x2, cos, sin, y, T, D // 2, x2.stride(0), y.stride(0),
        INTERLEAVED=interleaved, BACKWARD=backward, BLOCK=max(16, triton.next_power_of_2(D // 2)))
    return y.view(x.shape)

# %% [markdown]
# ## Part A — gelu_backward (2 points)
#
# $\operatorname{gelu}(x) = x\,\Phi(x)$ exactly, or $\tfrac12 x\,(1 + \tanh u)$ with
# $u = \sqrt{2/\pi}\,(x + 0.044715\,x^3)$ (`approximate="tanh"`, GPT-2's). Return $\bar x$ for either.
# %% solution id=gelu_backward
def gelu_backward(x, dy, approximate="none"):
    """x̄ for y = F.gelu(x, approximate=approximate), elementwise: x, dy and the result share one shape."""
    ### BEGIN SOLUTION
    if approximate == "tanh":
        k = math.sqrt(2 / math.pi)
        u = k * (x + 0.044715 * x**3)
        t = torch.tanh(u)
        return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x))
    cdf = 0.5 * (1 + torch.erf(x / math.sqrt(2)))
    pdf = torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return dy * (cdf + x * pdf)
    ### END SOLUTION

# %% test id=test_gelu_backward points=2
"""gelu_backward: against the autograd of F.gelu, exact and tanh, float64,
batch 1 and 7, 3-D inputs."""
course.selfcheck.gelu_backward(gelu_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.gelu_backward(gelu_backward)
### END HIDDEN TESTS

# %% [markdown]
# ## Part B — swiglu_backward (2 points)
#
# The gated MLP computes $a = xW_g$, $b = xW_u$ and $h = \operatorname{silu}(a) \odot b$, then $hW_d$. Given $a$,
# $b$ and $\bar h$, return $(\bar a, \bar b)$.
# %% solution id=swiglu_backward
def swiglu_backward(a, b, dh):
    """(ā, b̄) for h = silu(a) ⊙ b, with a, b, dh and both results of one shape (..., F)."""
    ### BEGIN SOLUTION
    s = torch.sigmoid(a)
    return dh * b * s * (1 + a * (1 - s)), dh * a * s
    ### END SOLUTION

# %% test id=test_swiglu_backward points=2
"""swiglu_backward: against the autograd of F.silu(a) * b, float64, batch 1
and 7, 3-D inputs."""
course.selfcheck.swiglu_backward(swiglu_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.swiglu_backward(swiglu_backward)
### END HIDDEN TESTS

# %% [markdown]
# ## Part C — swiglu_bwd_kernel (3 points)
#
# Part B as one Triton kernel: each program reads one block of `BLOCK` columns of one row of $a$, $b$ and $\bar h$
# once and writes the same block of $\bar a$ and $\bar b$, computing in `cdtype` (float32 for half inputs).
# %% solution id=swiglu_bwd_kernel
@triton.jit
def swiglu_bwd_kernel(
    A_ptr,  # (rows, F) gate pre-activation a
    B_ptr,  # (rows, F) up projection b
    DH_ptr,  # (rows, F) upstream gradient h̄
    DA_ptr,  # (rows, F) result ā
    DB_ptr,  # (rows, F) result b̄
    n_cols,  # F
    stride_a,  # elements from one row of a to the next (columns are contiguous in every tensor)
    stride_b,
    stride_dh,
    stride_da,
    stride_db,
    BLOCK: tl.constexpr,  # columns per program
):
    """ā and b̄ of h = silu(a) ⊙ b for columns pid(1)·BLOCK … of row pid(0). Grid (rows, cdiv(F, BLOCK))."""
    row = tl.program_id(0).to(tl.int64)  # int64: row · stride can pass 2³¹
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < n_cols
    a = tl.load(A_ptr + row * stride_a + cols, mask=inside, other=0.0)
    cdtype = tl.float64 if a.dtype == tl.float64 else tl.float32  # what the arithmetic runs in
    ### BEGIN SOLUTION
    b = tl.load(B_ptr + row * stride_b + cols, mask=inside, other=0.0).to(cdtype)
    dh = tl.load(DH_ptr + row * stride_dh + cols, mask=inside, other=0.0).to(cdtype)
    a = a.to(cdtype)
    s = 1 / (1 + tl.exp(-a))
    da = dh * b * s * (1 + a * (1 - s))
    db = dh * a * s
    tl.store(DA_ptr + row * stride_da + cols, da.to(DA_ptr.dtype.element_ty), mask=inside)
    tl.store(DB_ptr + row * stride_db + cols, db.to(DB_ptr.dtype.element_ty), mask=inside)
    ### END SOLUTION

# %% test id=test_swiglu_bwd_kernel points=3
"""swiglu_bwd_kernel: da and db against the autograd of F.silu(a) * b, F not
a multiple of BLOCK, NaN-padded rows, float64, float32 and float16 (computed
in float32); nothing written outside da and db; a float64 gradcheck."""
course.selfcheck.swiglu_bwd_kernel(swiglu_bwd_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.swiglu_bwd_kernel(swiglu_bwd_kernel)
### END HIDDEN TESTS

# %% [markdown]
# ## Part D — rope_backward (2 points)
#
# `rope_forward` (given) turns pair $i$ of position $t$ by the angle $\theta_{t,i}$. Return $\bar x$ from $\bar y$,
# for both layouts.
# %% solution id=rope_backward
def rope_backward(dy, cos, sin, interleaved=False):
    """x̄ for y = rope_forward(x, cos, sin, interleaved): dy (..., T, D), cos and sin (T, D/2)."""
    ### BEGIN SOLUTION
    g1, g2 = rope_pairs(dy, interleaved)
    return rope_join(g1 * cos + g2 * sin, g2 * cos - g1 * sin, interleaved)
    ### END SOLUTION

# %% test id=test_rope_backward points=2
"""rope_backward: against the autograd of rope_forward, both layouts,
float64, batch 1 and 7, 4-D inputs."""
course.selfcheck.rope_backward(rope_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.rope_backward(rope_backward)
### END HIDDEN TESTS

# %% [markdown]
# ## Part E — rope_kernel (3 points)
#
# RoPE as a Triton kernel, one row (one position of one head) per program: the same code turns forward and
# backward, `BACKWARD` choosing which, `INTERLEAVED` which layout.
# %% solution id=rope_kernel
@triton.jit
def rope_kernel(
    X_ptr,  # (rows, D) input: x, or ȳ for the backward; row r is position r % seq_len
    COS_ptr,  # (T, D/2) cos θ, contiguous
    SIN_ptr,  # (T, D/2) sin θ, contiguous
    Y_ptr,  # (rows, D) output: y, or x̄ for the backward
    seq_len,  # T
    half,  # D/2: pairs per row
    stride_x,  # elements from one row of X to the next (a row's elements are contiguous)
    stride_y,  # the same for Y
    INTERLEAVED: tl.constexpr,  # pairs (2i, 2i + 1) if True, else (i, i + D/2)
    BACKWARD: tl.constexpr,  # the VJP instead of the forward
    BLOCK: tl.constexpr,  # a power of two ≥ half, ≥ 16
):
    """Turn every pair of row pid(0) by its position's angles (or, BACKWARD, give the VJP). Grid (rows,)."""
    row = tl.program_id(0).to(tl.int64)
    pos = row % seq_len  # this row's position t
    i = tl.arange(0, BLOCK)  # pair indices
    inside = i < half
    cos = tl.load(COS_ptr + pos * half + i, mask=inside, other=0.0)
    sin = tl.load(SIN_ptr + pos * half + i, mask=inside, other=0.0)
    ### BEGIN SOLUTION
    if INTERLEAVED:
        first, second = 2 * i, 2 * i + 1
    else:
        first, second = i, i + half
    x1 = tl.load(X_ptr + row * stride_x + first, mask=inside, other=0.0)
    x2 = tl.load(X_ptr + row * stride_x + second, mask=inside, other=0.0)
    if BACKWARD:
        sin = -sin  # the transpose of a rotation by θ is the rotation by −θ
    tl.store(Y_ptr + row * stride_y + first, x1 * cos - x2 * sin, mask=inside)
    tl.store(Y_ptr + row * stride_y + second, x2 * cos + x1 * sin, mask=inside)
    ### END SOLUTION

# %% test id=test_rope_kernel points=3
"""rope_kernel: forward against rope_forward and backward against its
autograd, both layouts, D/2 not a power of two, NaN-padded rows, float64 and
float32; nothing written outside the output; a float64 gradcheck."""
course.selfcheck.rope_kernel(rope_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.rope_kernel(rope_kernel)
### END HIDDEN TESTS
