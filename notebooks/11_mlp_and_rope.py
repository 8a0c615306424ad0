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
#
# **What earlier notebooks settled.** Notebook 00 derived the VJP of an elementwise function — $\bar x = \bar y
# \odot f'(x)$, one multiply per element, no Jacobian built — and the sigmoid's, $\sigma' = \sigma(1 - \sigma)$.
# Notebook 01 derived the matmul's: for $y = xW$, $\bar x = \bar y W^\top$ and $\bar W = x^\top \bar y$. Every
# matmul of this notebook's MLP takes those as they are; what is new is what sits between the matmuls.
#
# **Where the kernels run.** As in notebooks 03–10: with a CUDA GPU Triton compiles your kernels for it; without
# one, its interpreter runs the same `@triton.jit` functions on the CPU, one program after another, so the launches
# here are small.
#
# Each test cell prints `✓ ...` when your code is right; when it is wrong, its first line names the kind of bug
# (`diagnosis: wrong-values — ...`, `transpose`, `half-accumulation`, `race`, `out-of-bounds`, …), the next lines
# say where, and the last one points to the hint that covers it. Every exercise is followed by three collapsed hints —
# questions and partial steps, never the code; open the first only when you are stuck — and every test cell by a
# collapsed recap of the answer: open it once your check passes.
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
# **Pictures and measurements.** The next cell holds what the pictures and measurements below need: a test that
# runs a part's visible check quietly (a measurement uses your code only once its check passes: a kernel that
# writes past its tensors can corrupt the notebook's memory), a counter of the bytes each PyTorch op reads and
# writes, and the float16 spacing that Part C's last measurement counts errors in.
# %%
import contextlib
import io

import matplotlib.pyplot as plt
import numpy as np
import torch.nn.functional as F
from matplotlib.patches import FancyArrowPatch, Rectangle
from torch.utils._python_dispatch import TorchDispatchMode

from course.peak_memory import backward_peak

MiB = 2**20


def passes_check(name):
    """Whether the function or kernel called `name` passes its part's visible check; its printout is swallowed,
    and a part not finished yet (a stub's course.todo()) fails."""
    check, answer = getattr(course.selfcheck, name), globals()[name]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            check(answer)
    except (AssertionError, NotImplementedError):
        return False
    return True


def when_passing(name, part):
    """passes_check(name), saying what to finish first when it fails."""
    ok = passes_check(name)
    if not ok:
        print(f"Finish Part {part} first ({name} does not pass its check yet): this cell uses it.")
    return ok


def tensor_bytes(objs):
    """The bytes of the tensors among objs."""
    return sum(t.numel() * t.element_size() for t in objs if isinstance(t, torch.Tensor))


class Traffic(TorchDispatchMode):
    """Inside `with Traffic() as t:`, one entry per PyTorch op in t.ops: (op, bytes of its tensor inputs, bytes of
    its outputs). Run eagerly, every op is its own kernel: it reads its inputs from memory and writes its result
    back. Views (slices, transposes) move nothing and are left out."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not func.is_view:
            outs = out if isinstance(out, (tuple, list)) else [out]
            self.ops.append((func.overloadpacket.__name__, tensor_bytes([*args, *kwargs.values()]), tensor_bytes(outs)))
        return out


def ulp16(x):
    """The spacing of float16 numbers at |x|, in float64: 2^(e − 10) for |x| in [2^e, 2^(e+1)), and the
    subnormals' 2^−24 below 2^−14."""
    e = torch.floor(torch.log2(x.abs().clamp_min(2.0**-14)))
    return torch.exp2(e - 10)

# %% [markdown]
# ## 1 · GELU, exact and approximated
#
# BERT and GPT-2 put GELU between the MLP's two matmuls, and Gemma still does, gated (GeGLU). It weighs its input
# by how likely a standard normal variable is to fall below it: $\operatorname{gelu}(x) = x\,\Phi(x)$ — close to
# $0$ for very negative $x$, close to $x$ for very positive $x$, smooth in between. $\Phi$ is an integral with no
# closed form (`erf`); the GELU paper offered a cheaper tanh approximation, GPT-2 shipped it, and
# `F.gelu(x, approximate="tanh")` keeps it: a model trained with one form is run with that form. The two forwards
# differ by less than $5 \cdot 10^{-4}$. Their backwards are two different formulas — the question of this part is
# how far apart the gradients are, and where.
# %% [markdown]
# ## Part A — gelu_backward (2 points)
#
# $\operatorname{gelu}(x) = x\,\Phi(x)$ exactly, or $\tfrac12 x\,(1 + \tanh u)$ with
# $u = \sqrt{2/\pi}\,(x + 0.044715\,x^3)$ (`approximate="tanh"`, GPT-2's). Return $\bar x$ for either, from $x$ and
# $\bar y$: elementwise, so notebook 00's rule gives $\bar x = \bar y \odot \operatorname{gelu}'(x)$, and the work
# is $\operatorname{gelu}'$ — twice. $x$ may have any shape; `torch.erf`, `torch.exp` and `torch.tanh` are all you
# need (no autograd).
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

# %% [markdown]
# <details><summary>Hint 1 — a product, and the derivative of a CDF</summary>
#
# $x\,\Phi(x)$ is a product of two functions of $x$: the product rule gives two terms. One is easy. The other needs
# $\Phi'$: $\Phi(x)$ is the probability that a standard normal variable falls below $x$, the area under the density
# $\varphi$ up to $x$. How fast does that area grow as $x$ moves right? Write $\Phi$ with `torch.erf` (what is the
# CDF of $\mathcal N(0, 1)$ in terms of $\operatorname{erf}$?) and $\varphi$ with `torch.exp`.
#
# </details>
#
# <details><summary>Hint 2 — the tanh form, through the chain</summary>
#
# $\tfrac12 x\,(1 + \tanh u(x))$ is a product again: $x$ times $\tfrac12(1 + \tanh u)$. The second factor is a
# chain: $x \to u \to \tanh u$. What is $\tanh'$, written with $\tanh u$ itself (so that you compute `tanh` once)?
# And $u'(x)$ for $u = \sqrt{2/\pi}\,(x + 0.044715\,x^3)$? Multiply the links. Which branch runs is a Python `if`
# on the string, and both must multiply by $\bar y$.
#
# </details>
#
# <details><summary>Hint 3 — by hand at x = 0 and x = 1</summary>
#
# At $x = 0$ both forms have slope $\tfrac12$: in the exact form the term with $x$ in front vanishes and
# $\Phi(0) = \tfrac12$; in the tanh form $\tanh 0 = 0$ does the same. Does your function give $\tfrac12 \bar y$
# there? At $x = 1$: $\Phi(1) = 0.8413$ and $\varphi(1) = e^{-1/2} / \sqrt{2\pi} = 0.2420$, so the exact slope is
# $1.0833$; the tanh form gives $1.0830$. If you get $0.84$, one term of the product rule is missing. The key
# identity: $\Phi' = \varphi$ — the derivative of a CDF is its density.
#
# </details>
# %% test id=test_gelu_backward points=2
"""gelu_backward: x̄ against the autograd of F.gelu, exact (approximate left
out, and "none") and "tanh", float64, batch 1 and 7, 3-D inputs."""
course.selfcheck.gelu_backward(gelu_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.gelu_backward(gelu_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# The product rule and $\Phi' = \varphi$ give the exact form's slope; the tanh form's is the product rule and the
# chain through $\tanh' = 1 - \tanh^2$:
#
# $$\boxed{\;\bar x = \bar y \odot \bigl(\Phi(x) + x\,\varphi(x)\bigr), \qquad
# \bar x_{\tanh} = \bar y \odot \Bigl(\tfrac12 (1 + \tanh u) + \tfrac12 x\,(1 - \tanh^2 u)\,\sqrt{2/\pi}\,
# (1 + 3 \cdot 0.044715\,x^2)\Bigr)\;}$$
#
# with $\Phi(x) = \tfrac12\bigl(1 + \operatorname{erf}(x / \sqrt 2)\bigr)$ and $\varphi(x) = e^{-x^2/2} / \sqrt{2\pi}$.
# Both slopes rise above 1 for $x > 0.75$ and fall below 0 for $x < -0.75$, where GELU has its minimum:
# GELU is not monotonic, unlike ReLU, and its gradient can flip the sign of $\bar y$.
#
# </details>
#
# **The two slopes, measured.** The cell below evaluates your `gelu_backward` with $\bar y = 1$ — which gives
# $\operatorname{gelu}'(x)$ itself — for both forms on 12,001 points of $[-6, 6]$ in float64, and draws them and
# their difference.
# %%
GELU_X = torch.linspace(-6, 6, 12_001, dtype=F64)  # steps of 0.001

if when_passing("gelu_backward", "A"):
    ones = torch.ones_like(GELU_X)
    slope = {form: gelu_backward(GELU_X, ones, approximate=form) for form in ("none", "tanh")}
    gap = slope["tanh"] - slope["none"]
    worst = gap.abs().argmax()
    print(f"largest |gelu'_tanh − gelu'_exact| on [−6, 6]: {gap.abs().max().item():.2e} at x = "
          f"{GELU_X[worst].item():+.3f} (and at {-GELU_X[worst].item():+.3f}, with the other sign)")
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot(GELU_X, slope["none"], label="exact: x·Φ(x)")
    left.plot(GELU_X, slope["tanh"], "--", label="tanh form")
    left.set(xlabel="x", ylabel="gelu'(x)", title="the two slopes: indistinguishable at this scale")
    right.plot(GELU_X, gap, color="C3")
    right.axhline(0, color="0.7", lw=0.8)
    right.plot(GELU_X[worst], gap[worst], "o", color="C3")
    right.set(xlabel="x", ylabel="gelu'_tanh(x) − gelu'_exact(x)", title="their difference")
    for ax in (left, right):
        ax.title.set_fontsize(10)
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    fig.tight_layout()
    plt.show()

# %% [markdown]
# The slopes differ by at most $8.7 \cdot 10^{-4}$, at $x = \pm 2.02$, and the difference is odd: for both forms
# $\operatorname{gelu}(x) - \operatorname{gelu}(-x) = x$, so $\operatorname{gelu}'(x) + \operatorname{gelu}'(-x) = 1$,
# and an error at $x$ comes back mirrored at $-x$. Far from 0 both slopes go to those of 0 and of $x$, and past
# $|x| = 5$ they agree to better than $10^{-5}$. The gap is a ninth of bfloat16's spacing near 1 ($2^{-7}$): a
# bfloat16 gradient cannot tell the forms apart, but a float32 one can, and a float64 gradcheck sees it at once. A
# backward must use the form its forward used: a tanh branch off by about $10^{-3}$ near $x = \pm 2$ is computing
# the exact form's slope.
# %% [markdown]
# ## 2 · The gated MLP
#
# Llama, Mistral and Qwen replace GELU with a gate. The MLP of a Llama-3-8B layer takes $x$ $(T, d)$ with
# $d = 4{,}096$ and computes two projections to $F = 14{,}336$ features, multiplies one, through SiLU, into the other,
# and projects back:
#
# $$a = x W_g, \quad b = x W_u \quad (T, F); \qquad h = \operatorname{silu}(a) \odot b; \qquad y = h W_d \quad (T, d).$$
#
# $\operatorname{silu}(a)$ decides, feature by feature and token by token, how much of $b$ passes ("SwiGLU"). The
# three matmuls' backwards are notebook 01's: $\bar h = \bar y W_d^\top$ and $\bar W_d = h^\top \bar y$, and at the
# other end $\bar x = \bar a W_g^\top + \bar b W_u^\top$, $\bar W_g = x^\top \bar a$, $\bar W_u = x^\top \bar b$. What
# sits between — $\bar a$ and $\bar b$ from $\bar h$ — is this part.
# %% [markdown]
# ## Part B — swiglu_backward (2 points)
#
# Given $a$, $b$ and $\bar h$, all $(\dots, F)$, return $(\bar a, \bar b)$ for $h = \operatorname{silu}(a) \odot b$,
# both of that shape. You are handed the pre-activation $a$ itself — not $\operatorname{silu}(a)$, not $h$ — so
# write everything from $a$, $b$ and $\bar h$ (`torch.sigmoid` is allowed; autograd is not). Each output element
# depends on one element of $a$ and one of $b$: no sums.
# %% solution id=swiglu_backward
def swiglu_backward(a, b, dh):
    """(ā, b̄) for h = silu(a) ⊙ b, with a, b, dh and both results of one shape (..., F)."""
    ### BEGIN SOLUTION
    s = torch.sigmoid(a)
    return dh * b * s * (1 + a * (1 - s)), dh * a * s
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — which factor does each input touch?</summary>
#
# $h$ is a product of two factors, and each input sits in exactly one of them. Hold $a$ fixed and move $b$: by how
# much does $h$ move, per unit of $b$? So $\bar b$ is $\bar h$ times which factor? Now hold $b$ fixed: $\bar a$ is
# $\bar h$ times the other factor times the slope of $\operatorname{silu}$ at $a$. If the check says they are swapped,
# your $\bar a$ came back where $\bar b$ belongs (or the reverse): which of your two results is multiplied by
# $\operatorname{silu}(a)$ — and is that the one whose input does *not* go through the SiLU?
#
# </details>
#
# <details><summary>Hint 2 — the slope of SiLU, and from which tensor</summary>
#
# $\operatorname{silu}(a) = a\,\sigma(a)$ is a product again. Notebook 00 gave $\sigma' = \sigma(1 - \sigma)$: write
# $\operatorname{silu}'(a)$ with $a$ and $\sigma(a)$ only, and compute $\sigma(a)$ once. Which tensor does the formula
# take? Here, $a$ — the tensor you are handed. A check that names *silu' from the wrong tensor* saw the slope
# evaluated at the wrong point: at $h$ or at $\operatorname{silu}(a)$ where $a$ was meant, or a formula made for the
# *output* applied to the input — notebook 00's $\sigma(1 - \sigma)$ is written in the sigmoid's output, and a
# backward that saved $\sigma(a)$ uses it that way. Could $\operatorname{silu}'$ be written from
# $\operatorname{silu}(a)$ alone, as the sigmoid's can from $\sigma(a)$? (Is SiLU one-to-one?) That answer is why a
# SwiGLU backward saves $a$, not its output.
#
# </details>
#
# <details><summary>Hint 3 — by hand at a = 0</summary>
#
# At $a = 0$: $\sigma(0) = \tfrac12$, $\operatorname{silu}(0) = 0$, and $\operatorname{silu}'(0) = \tfrac12$ (the
# product rule: $\sigma(0) + 0 \cdot \sigma'(0)$). Take $b = 2$ and $\bar h = 1$: then $\bar a = 1$ and $\bar b = 0$.
# A swapped backward returns $(0, 1)$. At $a = 1$, $b = 1$, $\bar h = 1$: $\sigma(1) = 0.7311$,
# $\operatorname{silu}(1) = 0.7311$, and $\operatorname{silu}'(1) = 0.7311 \cdot (1 + 1 \cdot 0.2689) = 0.9277$ —
# so $\bar a = 0.9277$ and $\bar b = 0.7311$. If your $\bar a$ is $0.1966$, you took $\sigma'(1)$ for
# $\operatorname{silu}'(1)$.
#
# </details>
# %% test id=test_swiglu_backward points=2
"""swiglu_backward: ā and b̄ against the autograd of F.silu(a) * b, float64,
batch 1, 2 and 7, 3-D inputs."""
course.selfcheck.swiglu_backward(swiglu_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.swiglu_backward(swiglu_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# $b$ touches only its own factor and $a$ only the other, and the slope of $\operatorname{silu}$ is the product rule
# with notebook 00's $\sigma'$:
#
# $$\boxed{\;\bar b = \bar h \odot \operatorname{silu}(a) = \bar h \odot a\,\sigma(a), \qquad
# \bar a = \bar h \odot b \odot \operatorname{silu}'(a), \quad
# \operatorname{silu}'(a) = \sigma(a)\bigl(1 + a\,(1 - \sigma(a))\bigr)\;}$$
#
# Everything comes from $a$ (through one $\sigma(a)$), $b$ and $\bar h$. SiLU is not one-to-one — it dips to
# $-0.278$ near $a = -1.28$ and comes back up — so $\operatorname{silu}'$ cannot be recovered from the output, and
# the backward needs $a$ itself: saved from the forward, or recomputed. The next section measures that choice.
#
# </details>
# %% [markdown]
# ## 3 · Save or recompute
#
# Your backward needs $a$ and $b$, $(T, F)$ each. The forward has them; the question is whether they stay in memory
# until the backward comes. In a training step every layer's forward runs before any backward, so what a layer keeps
# for its backward is held 32 times over, at once. Four ways to run the same MLP:
#
# - **PyTorch autograd**, `(F.silu(x @ Wg) * (x @ Wu)) @ Wd` as written: each op saves its inputs — $a$ for the SiLU,
#   $\operatorname{silu}(a)$ and $b$ for the product, $h$ for the last matmul;
# - **save $a$ and $b$**: the backward rebuilds $h$ from them, one elementwise op;
# - **save $h$**, for $\bar W_d = h^\top \bar y$, and recompute $a$ and $b$ from $x$: two more GEMMs;
# - **save $x$ only** — which every way keeps, as the first matmuls' input — and recompute $a$, $b$ and $h$.
#
# Before the measurement: how many $(T, F)$ tensors does each keep? What does each recompute, at what cost? And one
# of the four is never worth choosing — which?
#
# The cell below writes the three hand-made ways as `torch.autograd.Function`s whose backward is notebook 01's
# matmul VJPs around your `swiglu_backward`, and measures each with `backward_peak` from `course.peak_memory`: the
# bytes the forward saved for the backward (beyond $x$ and the weights, which exist anyway) and the most the
# backward's own tensors held at one moment. Llama's shapes are too big for a CPU notebook: the MLP here has
# $d = 128$ and $F = 448$ — Llama-3-8B's ratio $F/d = 3.5$ at a thirty-second of its width — in float32, for
# $T$ = 256 to 2,048. The counts come out in $(T, F)$ tensors, which scale to any width.
# %%
D_CPU, F_CPU = 128, 448  # the measured MLP: Llama-3-8B's F / d = 3.5, at 1/32 of its width
T_SIZES = [256, 512, 1024, 2048]


def mlp_grads(x, Wg, Wu, Wd, a, b, h, dy):
    """(x̄, W̄g, W̄u, W̄d) of y = h Wd, h = silu(a) ⊙ b, a = x Wg, b = x Wu: notebook 01's matmul VJPs around
    your swiglu_backward."""
    dh = dy @ Wd.T  # (T, F)
    da, db = swiglu_backward(a, b, dh)  # (T, F) each
    return da @ Wg.T + db @ Wu.T, x.T @ da, x.T @ db, h.T @ dy


class SaveAB(torch.autograd.Function):
    """Saves a and b: 2·T·F numbers. The backward rebuilds h from them, elementwise."""

    @staticmethod
    def forward(ctx, x, Wg, Wu, Wd):
        a, b = x @ Wg, x @ Wu  # (T, F) each
        ctx.save_for_backward(x, Wg, Wu, Wd, a, b)
        return (F.silu(a) * b) @ Wd

    @staticmethod
    def backward(ctx, dy):
        x, Wg, Wu, Wd, a, b = ctx.saved_tensors
        return mlp_grads(x, Wg, Wu, Wd, a, b, F.silu(a) * b, dy)


class SaveH(torch.autograd.Function):
    """Saves h: T·F numbers. The backward recomputes a and b from x: two GEMMs."""

    @staticmethod
    def forward(ctx, x, Wg, Wu, Wd):
        h = F.silu(x @ Wg) * (x @ Wu)  # (T, F)
        ctx.save_for_backward(x, Wg, Wu, Wd, h)
        return h @ Wd

    @staticmethod
    def backward(ctx, dy):
        x, Wg, Wu, Wd, h = ctx.saved_tensors
        return mlp_grads(x, Wg, Wu, Wd, x @ Wg, x @ Wu, h, dy)


class SaveX(torch.autograd.Function):
    """Saves nothing beyond its inputs. The backward recomputes a and b (two GEMMs) and h (elementwise)."""

    @staticmethod
    def forward(ctx, x, Wg, Wu, Wd):
        ctx.save_for_backward(x, Wg, Wu, Wd)
        return (F.silu(x @ Wg) * (x @ Wu)) @ Wd

    @staticmethod
    def backward(ctx, dy):
        x, Wg, Wu, Wd = ctx.saved_tensors
        a, b = x @ Wg, x @ Wu
        return mlp_grads(x, Wg, Wu, Wd, a, b, F.silu(a) * b, dy)


def eager_mlp(x, Wg, Wu, Wd):
    """The MLP as PyTorch code writes it: autograd saves what each op needs."""
    return (F.silu(x @ Wg) * (x @ Wu)) @ Wd


WAYS = {"PyTorch autograd": eager_mlp, "save a and b": SaveAB.apply, "save h, recompute a, b": SaveH.apply,
        "save x only, recompute all": SaveX.apply}
memory = {}  # way -> {T: backward_peak's {"saved", "backward", "total"}, in bytes}
if when_passing("swiglu_backward", "B"):
    gen = torch.Generator().manual_seed(11)
    Wg, Wu = (torch.randn(D_CPU, F_CPU, generator=gen) / D_CPU**0.5 for _ in range(2))  # (d, F) each
    Wd = torch.randn(F_CPU, D_CPU, generator=gen) / F_CPU**0.5  # (F, d)
    for T in T_SIZES:
        x, dy = (torch.randn(T, D_CPU, generator=gen) for _ in range(2))  # (T, d) each
        for name, fn in WAYS.items():
            memory.setdefault(name, {})[T] = backward_peak(fn, x, Wg, Wu, Wd, grad=dy)

# %%
if memory:
    tf = {T: T * F_CPU * 4 for T in T_SIZES}  # bytes of one (T, F) float32 tensor
    print(f"{'':28} {'saved, in (T, F) tensors':>26} | {'backward peak, in (T, F) tensors':>34}")
    print(f"{'T':>28} " + " ".join(f"{T:>6}" for T in T_SIZES) + " | " + " ".join(f"{T:>8}" for T in T_SIZES))
    for name, by_T in memory.items():
        print(f"{name:>28} " + " ".join(f"{by_T[T]['saved'] / tf[T]:6.2f}" for T in T_SIZES) + " | "
              + " ".join(f"{by_T[T]['backward'] / tf[T]:8.2f}" for T in T_SIZES))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.9))
    for name, by_T in memory.items():
        left.plot(T_SIZES, [by_T[T]["saved"] / MiB for T in T_SIZES], marker="o", label=name)
        right.plot(T_SIZES, [by_T[T]["backward"] / MiB for T in T_SIZES], marker="o", label=name)
    left.set(xlabel="tokens T", ylabel="MiB", title="kept from the forward for the backward, per layer")
    right.set(xlabel="tokens T", ylabel="MiB", title="the backward's own peak, one layer")
    for ax in (left, right):
        ax.set_xticks(T_SIZES, [f"{T:,}" for T in T_SIZES])
        ax.title.set_fontsize(10)
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    fig.suptitle(f"SwiGLU MLP, d = {D_CPU}, F = {F_CPU}, float32 (measured on this CPU)", fontsize=10)
    fig.tight_layout()
    plt.show()

# %% [markdown]
# The counts are exact and do not move with $T$: autograd keeps 4 tensors of $(T, F)$, saving $a$ and $b$ keeps 2,
# saving $h$ keeps 1, and saving $x$ keeps none. The backward's own peak, on the right, goes the other way: what a
# way did not keep, its backward rebuilds — $h$, or $a$ and $b$ — beside $\bar h$, $\bar a$, $\bar b$ and your
# `swiglu_backward`'s temporaries (autograd's is lowest: it frees each saved tensor as soon as its op's backward has
# run, and its SiLU backward is one fused op). But that peak belongs to one layer at a time, and is freed before
# the next layer's backward starts, while the left panel is held by every layer at once, from its forward to its
# backward. The choice is made on the left.
#
# At Llama-3-8B's width the cell below turns those counts into GiB for one sequence of 8,192 tokens in bfloat16, and
# the two recomputed GEMMs into FLOPs.
# %%
LLAMA_D, LLAMA_F, LLAMA_LAYERS = 4096, 14_336, 32  # Llama-3-8B's MLP
T_LLAMA, BF16 = 8192, 2  # one sequence of 8,192 tokens; bytes per bfloat16
TF_GIB = T_LLAMA * LLAMA_F * BF16 * LLAMA_LAYERS / 2**30  # one (T, F) tensor in every layer
GEMM = 2 * T_LLAMA * LLAMA_D * LLAMA_F  # FLOPs of one of the MLP's three matmuls
TRAIN_GEMMS = 3 * 3  # three in the forward, two per matmul in the backward
KEPT = {"PyTorch autograd": (4, 0), "save a and b": (2, 0), "save h, recompute a, b": (1, 2),
        "save x only, recompute all": (0, 2)}  # way -> ((T, F) tensors kept, GEMMs recomputed)
print(f"one (T, F) bfloat16 tensor in each of {LLAMA_LAYERS} layers: {TF_GIB:.1f} GiB; one GEMM: "
      f"{GEMM / 1e12:.2f} TFLOP per layer, of the MLP's {TRAIN_GEMMS * GEMM / 1e12:.2f} per training step")
for name, (tensors, gemms) in KEPT.items():
    print(f"{name:>28}: keeps {tensors * TF_GIB:5.1f} GiB, recomputes {gemms * GEMM * LLAMA_LAYERS / 1e12:5.1f} "
          f"TFLOP ({gemms / TRAIN_GEMMS:.0%} more MLP FLOPs)")

# %% [markdown]
# At $T = 8{,}192$ one $(T, F)$ tensor in each of the 32 layers is 7.0 GiB, so autograd keeps 28.0 GiB for the MLPs
# alone — more than the model's 15 GiB of bfloat16 weights — and saving $a$ and $b$ halves it to 14.0 GiB at no
# cost in FLOPs: the backward rebuilds $\operatorname{silu}(a)$ and $h$ elementwise, which a fused kernel does in
# registers. Liger-Kernel's fused SwiGLU saves $a$ and $b$ and rebuilds $\operatorname{silu}(a)$ in its backward
# kernel (its down projection, a separate module, still keeps $h$: 3 tensors, not 2). Recomputing $a$ and $b$ costs two of the MLP's nine GEMMs
# again, 22% more MLP FLOPs (61.6 TFLOP per sequence here), and is what activation checkpointing does when memory,
# not time, is the limit.
#
# The one never worth choosing is **save $h$**: it pays for the two GEMMs and still keeps a tensor, when $h$ is
# one elementwise op away from the $a$ and $b$ it recomputes. The rule: once you recompute something expensive,
# keep nothing that is cheap to rebuild from it.
# %% [markdown]
# ## 4 · Why one kernel
#
# Your `swiglu_backward` is short, and each of its operators is a separate kernel when PyTorch runs it: each reads
# its operands from GPU memory and writes its result back, and the next one reads it again. Elementwise ops do a
# few FLOPs per element, far below what a GPU can do per byte it moves (the roofline of notebook 05), so their time
# is their traffic. The cell below counts it: every op PyTorch runs for autograd's backward of `F.silu(a) * b`, and
# for your `swiglu_backward`, with the bytes each reads and writes — against a fused kernel, which reads $a$, $b$ and
# $\bar h$ once and writes $\bar a$ and $\bar b$ once: five passes over a $(T, F)$ tensor.
# %%
def autograd_swiglu_backward(a, b, dh):
    """(ā, b̄) by PyTorch's autograd of F.silu(a) * b, the forward run outside what Traffic counts."""
    a, b = (t.detach().requires_grad_(True) for t in (a, b))
    h = F.silu(a) * b
    with Traffic() as traffic:
        grads = torch.autograd.grad(h, (a, b), dh)
    return grads, traffic.ops


gen = torch.Generator().manual_seed(12)
a, b, dh = (torch.randn(64, F_CPU, generator=gen) for _ in range(3))  # (T, F) each, float32
one = a.numel() * a.element_size()  # bytes of one (T, F) tensor
passes = {"PyTorch autograd": autograd_swiglu_backward(a, b, dh)[1]}
if when_passing("swiglu_backward", "B"):
    with Traffic() as traffic:
        swiglu_backward(a, b, dh)
    passes["your swiglu_backward"] = traffic.ops
passes["one fused kernel"] = [("load a, b, h̄", 3 * one, 0), ("store ā, b̄", 0, 2 * one)]
for name, ops in passes.items():
    print(f"{name}: {len(ops)} ops — " + ", ".join(f"{op} {r // one}r+{w // one}w" for op, r, w in ops))

fig, ax = plt.subplots(figsize=(7.2, 2.6))
for row, ops in enumerate(passes.values()):
    read, written = sum(r for _, r, _ in ops) / one, sum(w for _, _, w in ops) / one
    ax.barh(row, read, color="C0", label="read" if row == 0 else None)
    ax.barh(row, written, left=read, color="C1", label="written" if row == 0 else None)
    ax.text(read + written + 0.2, row, f"{read + written:.0f}", va="center", fontsize=9)
ax.set_yticks(range(len(passes)), list(passes))
ax.invert_yaxis()
ax.set(xlabel="passes over one (T, F) tensor", title="memory traffic of SwiGLU's backward (ā and b̄ from a, b, h̄)")
ax.title.set_fontsize(10)
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
plt.show()
H100_BYTES_PER_S = 3.35e12  # an H100 SXM's memory bandwidth
tf_bytes = T_LLAMA * LLAMA_F * BF16  # one (T, F) bfloat16 tensor of one layer, Llama-3-8B at T = 8,192
for name, ops in passes.items():
    moved = sum(r + w for _, r, w in ops) / one * tf_bytes
    print(f"{name:>22}: {moved / 1e9:5.2f} GB per layer at Llama-3-8B's width, T = 8,192: "
          f"{moved / H100_BYTES_PER_S * 1e3:.2f} ms at an H100's bandwidth")

# %% [markdown]
# Autograd runs three kernels — $\bar h \odot b$, $\bar h \odot \operatorname{silu}(a)$ and a fused
# `silu_backward` — each reading two tensors and writing one: 9 passes, against the fused kernel's 5. (It reads
# $\operatorname{silu}(a)$ that its forward saved: the 4 tensors of §3.) A backward written as one line of PyTorch
# per term is worse: every `*`, `+` and `1 -` is its own round trip, and the count above is typically two to three
# times autograd's. At Llama-3-8B's width and $T = 8{,}192$ a pass over a $(T, F)$ bfloat16 tensor is 0.23 GB, so the
# fused kernel moves 1.17 GB per layer — 0.35 ms at an H100's 3.35 TB/s — and autograd 2.11 GB.
#
# The fused kernel can also compute in a wider type than it stores: the loads of float16 $a$, $b$, $\bar h$ are
# widened to float32 in registers, all the arithmetic — $\sigma$, the products — runs there, and only $\bar a$ and
# $\bar b$ are rounded to float16, once each. Part C's last cell measures what that buys.
# %% [markdown]
# ## Part C — swiglu_bwd_kernel (3 points)
#
# Part B as one Triton kernel. `swiglu_bwd` in the given cell views $a$, $b$, $\bar h$ as `rows` $\times F$ and
# launches
#
# ```python
# swiglu_bwd_kernel[(a2.shape[0], cdiv(F_, block))](
#     a2, b2, dh2, da, db, F_, a2.stride(0), b2.stride(0), dh2.stride(0), da.stride(0), db.stride(0),
#     BLOCK=block)
# ```
#
# - One program per block of `BLOCK` columns (`program_id(1)`) of one row (`program_id(0)`). The prologue gives the
#   row, the columns, the mask `inside` of the columns that exist, the block of $a$, and `cdtype`.
# - Each tensor has its own row stride — a row may sit inside a wider buffer — and its columns are contiguous.
#   $F$ need not be a multiple of `BLOCK`: no lane past $F$ may load or store.
# - Read the block of $b$ and $\bar h$ once, compute $\bar a$ and $\bar b$ in `cdtype` — float64 for float64 inputs,
#   else float32, float16 inputs included — and store each cast to its output's dtype. Nothing else is written.
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

# %% [markdown]
# <details><summary>Hint 1 — programs, masks, and where a program writes</summary>
#
# Program $(r, c)$ owns columns $c \cdot \text{BLOCK}, \dots, (c + 1) \cdot \text{BLOCK} - 1$ of row $r$, and only
# those below $F$ exist: the prologue's `inside` says which. Where does row $r$ of $b$ start — at $r \cdot F$ or at
# $r$ times its own stride? The check lays its rows inside wider buffers padded with NaN, so a row found by the wrong
# stride reads NaN or another row. Which loads and stores need `inside`? If the check says `out-of-bounds`, a lane
# past $F$ reached memory; if it says `race`, two programs wrote one element: which offset did they share?
#
# </details>
#
# <details><summary>Hint 2 — dtypes: what the arithmetic runs in, what is stored</summary>
#
# `a` arrives in the input's dtype — float16 for half inputs — and the prologue's `cdtype` is what the arithmetic
# should run in. Which of your loaded blocks still need converting before the first product? A check that passes in
# float32 and fails in float16 only, with a `half-accumulation` diagnosis, saw products of three half-precision
# factors and a $\sigma$ rounded to float16: the error grows with every op done in 11 bits. And the stores: in which
# dtype does `da`'s tensor hold its elements (`DA_ptr.dtype.element_ty`), and what do you convert to before storing?
#
# </details>
#
# <details><summary>Hint 3 — the body, step by step</summary>
#
# The body has four steps: (1) load the blocks of $b$ and $\bar h$ with the same mask as $a$, and bring all three to
# `cdtype`; (2) $\sigma(a) = 1 / (1 + e^{-a})$ with `tl.exp`; (3) $\bar a$ and $\bar b$ exactly as in Part B, now on
# blocks; (4) two masked stores, each cast. By hand, for a lane past $F$ loaded with `other=0.0`: $a = 0$, so
# $\sigma = \tfrac12$, and $\bar a = \bar b = 0$ — harmless arithmetic, provided nothing of it is stored. And row 1 of
# a tensor whose rows are $2F + 3$ apart starts at element $2F + 3$, not $F$.
#
# </details>
# %% test id=test_swiglu_bwd_kernel points=3
"""swiglu_bwd_kernel: da and db against the autograd of F.silu(a) * b, F not a
multiple of BLOCK, NaN-padded rows, float64, float32, and float16 within one
float16 spacing (float32 arithmetic); nothing written outside da and db; a
float64 gradcheck."""
course.selfcheck.swiglu_bwd_kernel(swiglu_bwd_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.swiglu_bwd_kernel(swiglu_bwd_kernel)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# Each program reads its block of $a$, $b$, $\bar h$ at `row * stride + cols` with the mask `inside`, widens all
# three to `cdtype`, forms $s = \sigma(a)$, then
#
# $$\boxed{\;\bar a = \bar h\, b\, s\,\bigl(1 + a(1 - s)\bigr), \qquad \bar b = \bar h\, a\, s\;}$$
#
# in registers, and stores both under the same mask, each converted to its output's element type. Five passes over a
# $(T, F)$ tensor, the least any backward can move: it must read three tensors and write two. The grid
# (`rows`, $\lceil F / \text{BLOCK} \rceil$) gives every element to exactly one program, so no two programs write
# the same place and no lane past $F$ writes at all.
#
# </details>
#
# **What computing in float32 buys.** The cell below runs your kernel on float16 $a$, $b$, $\bar h$ (64 rows of
# $F = 448$, drawn with standard deviation 3) and, for comparison, your Part B on the same float16 tensors — PyTorch
# rounds every op's result to float16 — and measures both $\bar a$ against the float64 answer for the same float16
# inputs, in units of float16's spacing at each value (ULPs). A correctly rounded float16 result is within half a ULP.
# %%
if when_passing("swiglu_bwd_kernel", "C") and when_passing("swiglu_backward", "B"):
    gen = torch.Generator().manual_seed(13)
    half = [(3 * torch.randn(64, F_CPU, generator=gen)).half() for _ in range(3)]  # a, b, h̄ in float16
    (exact, _), _ = autograd_swiglu_backward(*(t.double() for t in half))  # ā in float64, of the float16 inputs
    kernel_da, _ = swiglu_bwd(*(t.to(DEVICE) for t in half))
    per_op_da, _ = swiglu_backward(*half)
    ulps = {"your kernel (float32 inside)": kernel_da, "your Part B in float16, op by op": per_op_da}
    ulps = {name: ((da.cpu().double() - exact).abs() / ulp16(exact)).flatten() for name, da in ulps.items()}
    fig, ax = plt.subplots(figsize=(7.2, 3.4))
    bins = np.linspace(0, 8, 33)
    for name, err in ulps.items():
        print(f"{name:>34}: within ½ ULP {(err <= 0.5).double().mean():6.1%}, median {err.median():.2f}, "
              f"largest {err.max():.1f} ULP")
        ax.hist(err.clamp(max=bins[-1]).numpy(), bins=bins, alpha=0.6, label=name)
    ax.axvline(0.5, color="k", lw=0.8, ls=":")
    ax.set(xlabel="|ā − exact| in float16 ULPs (the last bin holds everything past 8)", ylabel="elements",
           title="ā from float16 inputs: one rounding, or one per op")
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    plt.show()

# %% [markdown]
# The kernel rounds once, at the store: its $\bar a$ is correctly rounded, within half a ULP everywhere. Computed op
# by op in float16, each of the half-dozen ops of a one-line-per-term backward adds up to half a ULP of its own: with
# the course's own Part B, fewer than half of the elements are correctly rounded, and the worst are hundreds of ULPs
# off. Those sit near $a = -1.28$, where $\operatorname{silu}'(a)$ crosses zero: $1 + a(1 - \sigma(a))$ is a
# difference of nearly equal numbers there, and a $\sigma$ already rounded to 11 bits leaves it few correct ones.
# Computing in float32 costs the kernel nothing: its time is its five passes over memory, float16 either way.
# %% [markdown]
# ## 5 · RoPE: rotating pairs
#
# Attention scores compare a query with a key, $q_t^\top k_s$, and nothing in them says where the two tokens sit.
# Rotary position embedding (RoPE; Llama, Mistral, Qwen, GPT-NeoX) writes the position into $q$ and $k$ by turning
# them: the $D$ features of a head are taken as $D/2$ pairs, and pair $i$ of the token at position $t$ is rotated
# by the angle $\theta_{t,i} = t \cdot \text{base}^{-2i/D}$ (`rope_angles`, base $10{,}000$). Turning $q_t$ by
# $\theta_t$ and $k_s$ by $\theta_s$ leaves their dot product depending on $\theta_t - \theta_s$ only: on how far
# apart the tokens are, not where. Each pair rotates at its own rate, from one turn every $2\pi$ tokens for pair 0
# to one every 54,000 tokens or so for the last pair of a 128-wide head.
#
# *Which* features pair up is a convention, and two are in use. GPT-J pairs neighbours, $(2i, 2i + 1)$ —
# "interleaved". GPT-NeoX and Llama pair feature $i$ with feature $i + D/2$ — "half-split" — because two contiguous
# halves are cheaper to slice. A checkpoint's $W_q$ and $W_k$ are laid out for one of them (converting Meta's Llama
# weights to Hugging Face's permutes their rows for exactly this reason); rotate the wrong pairs and every score is
# wrong, with nothing to warn you. `rope_pairs` and `rope_join` in the given cell hold both conventions.
# %%
def draw_layout(ax, D, interleaved):
    """The D features of one row as boxes coloured by the pair they belong to, an arc joining each pair."""
    first, second = rope_pairs(torch.arange(D), interleaved)
    colour = {}
    for i, (p, q) in enumerate(zip(first.tolist(), second.tolist())):
        colour[p] = colour[q] = f"C{i}"
        ax.add_patch(FancyArrowPatch((p + 0.5, 1.05), (q + 0.5, 1.05), connectionstyle="arc3,rad=-0.45",
                                     arrowstyle="-", color=f"C{i}", lw=1.5))
    for e in range(D):
        ax.add_patch(Rectangle((e + 0.05, 0.1), 0.9, 0.9, facecolor=colour[e], alpha=0.55, edgecolor="0.25"))
        ax.text(e + 0.5, 0.55, f"x{e}", ha="center", va="center", fontsize=9)
    ax.set(xlim=(-0.2, D + 0.2), ylim=(0, 3.2), title=("interleaved (GPT-J): pairs (2i, 2i + 1)" if interleaved
                                                       else "half-split (GPT-NeoX, Llama): pairs (i, i + D/2)"))
    ax.title.set_fontsize(10)
    ax.axis("off")


fig, axes = plt.subplots(2, 1, figsize=(7.5, 3.6))
for ax, interleaved in zip(axes, (False, True)):
    draw_layout(ax, 8, interleaved)
fig.suptitle("D = 8: which features rotate together (one colour per pair i = 0 … 3)", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# In both layouts the rotation of one pair is the same map,
#
# $$\begin{pmatrix} y_1 \\ y_2 \end{pmatrix} = \begin{pmatrix} \cos\theta & -\sin\theta \\ \sin\theta & \cos\theta
# \end{pmatrix} \begin{pmatrix} x_1 \\ x_2 \end{pmatrix} = R(\theta)\,x,$$
#
# which is what `rope_forward` computes, pair by pair, with `cos` and `sin` of shape $(T, D/2)$ broadcast over
# batch and heads. It is linear in $x$. Before you start: what is the Jacobian of a linear map, and which matrix
# does its VJP multiply $\bar y$ by (notebooks 00 and 01)?
# %% [markdown]
# ## Part D — rope_backward (2 points)
#
# `rope_forward` (given) turns pair $i$ of position $t$ by the angle $\theta_{t,i}$. Return $\bar x$ from $\bar y$,
# for both layouts: `dy` is $(\dots, T, D)$, `cos` and `sin` are $(T, D/2)$, and `interleaved` picks the pairs as in
# `rope_forward`. Any correct form passes, and the shortest is one line.
# %% solution id=rope_backward
def rope_backward(dy, cos, sin, interleaved=False):
    """x̄ for y = rope_forward(x, cos, sin, interleaved): dy (..., T, D), cos and sin (T, D/2)."""
    ### BEGIN SOLUTION
    g1, g2 = rope_pairs(dy, interleaved)
    return rope_join(g1 * cos + g2 * sin, g2 * cos - g1 * sin, interleaved)
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — one pair's Jacobian</summary>
#
# Take one pair at one position: $y = R(\theta)\,x$ with the $2 \times 2$ matrix above. What is
# $\partial y / \partial x$ — a matrix that does not depend on $x$? The VJP contract of notebook 00 gives
# $\bar x = J^\top \bar y$: so $\bar x$ is $\bar y$ multiplied by which matrix? The pairs do not mix — pair $i$ of
# $y$ depends only on pair $i$ of $x$ — and $\theta$ is a constant, not an input: there is no $\bar\theta$ to return.
#
# </details>
#
# <details><summary>Hint 2 — what Rᵀ is, and which elements pair</summary>
#
# Transpose $R(\theta)$: which entries change sign? The result is again a rotation — by which angle? A check that
# says `transpose` saw $\bar y$ rotated by $+\theta$ where the transpose was meant: the forward run again. Then the
# layout: `rope_pairs(dy, interleaved)` gives the two halves of every pair of $\bar y$, and `rope_join` puts two
# halves back, for either layout. A check that says `wrong-values` and names a layout saw the other layout's pairs
# rotated: where does your code choose the pairs — through the `interleaved` flag, or by a slice of its own?
#
# </details>
#
# <details><summary>Hint 3 — by hand at θ = 90°</summary>
#
# At $\theta = 90°$, $\cos\theta = 0$ and $\sin\theta = 1$: the forward sends $(x_1, x_2)$ to $(-x_2, x_1)$. Take
# $\bar y = (1, 0)$. The loss is then $\bar y^\top y = -x_2$, so $\bar x = (0, -1)$. Does your formula give that? A
# rotation by $+90°$ gives $(0, 1)$: the `transpose` bug. The key identity: a rotation's transpose is its inverse,
# $R(\theta)^\top = R(-\theta)$. Which given function rotates by any angle you hand it, through `cos` and `sin` — and
# what do you hand it to turn by $-\theta$?
#
# </details>
# %% test id=test_rope_backward points=2
"""rope_backward: x̄ against the autograd of rope_forward, both layouts (the
flag left out too), D/2 odd and even, float64, batch 1 and 7, 4-D inputs."""
course.selfcheck.rope_backward(rope_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.rope_backward(rope_backward)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# One pair's Jacobian is $R(\theta)$ itself, so its VJP multiplies by the transpose, and the transpose of a rotation
# is the rotation back:
#
# $$\boxed{\;\bar x = R(\theta)^\top \bar y = R(-\theta)\,\bar y: \quad
# \bar x_1 = \bar y_1 \cos\theta + \bar y_2 \sin\theta, \quad \bar x_2 = \bar y_2 \cos\theta - \bar y_1 \sin\theta\;}$$
#
# pair by pair, with the pairs of the same layout as the forward. Since $\cos(-\theta) = \cos\theta$ and
# $\sin(-\theta) = -\sin\theta$, the whole backward is the given forward with `-sin` in place of `sin`: no new code.
# Nothing of $x$ is needed, so RoPE's backward saves no activation at all — only the angle table, shared by every
# head and every layer.
#
# </details>
#
# **The rotation and its transpose, pictured, and the inverse property.** $R^\top R = I$, so running your backward
# on the forward's output returns its input: the cell below checks it in both layouts, then draws one pair.
# %%
if when_passing("rope_backward", "D"):
    gen = torch.Generator().manual_seed(14)
    x = torch.randn(2, 3, 10, 16, generator=gen, dtype=F64).to(DEVICE)  # (B, H, T, D)
    cos, sin = rope_angles(10, 16)  # (T, D/2) each
    for interleaved in (False, True):
        back = rope_backward(rope_forward(x, cos, sin, interleaved), cos, sin, interleaved)
        print(f"interleaved={interleaved}: rope_backward(rope_forward(x)) against x, relative error "
              f"{course.relative_error(back, x):.0e}")
    theta = 1.0  # radians
    R = torch.tensor([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]], dtype=F64)
    pair = torch.tensor([1.0, 0.3], dtype=F64)
    c, s = torch.full((1, 1), math.cos(theta), dtype=F64), torch.full((1, 1), math.sin(theta), dtype=F64)
    turned = rope_forward(pair.view(1, 2), c, s)[0]  # R(θ) x
    returned = rope_backward(turned.view(1, 2), c, s)[0]  # Rᵀ R x
    fig, ax = plt.subplots(figsize=(4.2, 4.2))
    circle = np.linspace(0, 2 * np.pi, 200)
    r = pair.norm().item()
    ax.plot(r * np.cos(circle), r * np.sin(circle), color="0.85")
    for vec, colour, lw, label in [(pair, "C0", 6, "x"), (turned, "C1", 2, "y = R(θ) x"),
                                   (returned, "C2", 2, "rope_backward(y) = Rᵀ y: x again")]:
        ax.annotate("", vec.tolist(), (0, 0), arrowprops=dict(arrowstyle="->", color=colour, lw=lw, alpha=0.8))
        ax.plot([], [], color=colour, lw=lw, label=label)
    ax.text(*(0.45 * (pair + turned)).tolist(), "θ = 1 rad", fontsize=8)
    ax.set(xlim=(-1.2, 1.2), ylim=(-1.2, 1.2), aspect="equal", title="one pair: Rᵀ turns back by θ")
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    plt.show()
    print(f"R(θ)ᵀ R(θ) = {(R.T @ R).round(decimals=12).tolist()}")

# %% [markdown]
# The backward of the forward gives back $x$ to float64's rounding: RoPE's VJP is its inverse. That is special to
# maps whose Jacobian is orthogonal ($J^\top J = I$: lengths kept). For most functions the backward of the forward
# is not the input at all.
# %% [markdown]
# ## Part E — rope_kernel (3 points)
#
# RoPE as a Triton kernel, one row — one position of one head — per program: the same code turns forward and
# backward, `BACKWARD` choosing which, `INTERLEAVED` which layout. `rope_apply` in the given cell views $x$ as
# `rows` $\times D$ and launches
#
# ```python
# rope_kernel[(x2.shape[0],)](
#     x2, cos, sin, y, T, D // 2, x2.stride(0), y.stride(0),
#     INTERLEAVED=interleaved, BACKWARD=backward, BLOCK=max(16, triton.next_power_of_2(D // 2)))
# ```
#
# - Row $r$ is position $r \bmod T$; the prologue loads that position's `cos` and `sin` for lanes $i < D/2$ (one
#   lane per pair) under the mask `inside`. $D/2$ need not be a power of two.
# - Load both elements of every pair of the row, rotate, and store the pair into the same row of $Y$ — $X$ and $Y$
#   each have their own row stride. Nothing else is written.
# - `INTERLEAVED` and `BACKWARD` are `tl.constexpr`: Triton compiles one kernel per value, so an `if` on them costs
#   nothing at run time. With `BACKWARD` the kernel receives $\bar y$ and returns $\bar x$ (Part D).
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

# %% [markdown]
# <details><summary>Hint 1 — programs, the row's position, and masks</summary>
#
# The program owns row $r$ = `program_id(0)` of $X$ and of $Y$: where does that row start in each, given their row
# strides? Its position, which chooses the angles, is the prologue's `pos` — why $r \bmod T$, for rows laid out as
# (batch, head, position)? Lane $i$ handles pair $i$, and only lanes below $D/2$ are pairs: which loads and stores
# need `inside`? If the check says `out-of-bounds`, a lane past $D/2$ reached into the next row, or past the tensor;
# if it says `race`, two programs — or two lanes — wrote the same element: do your indices give every element of
# the row to exactly one lane?
#
# </details>
#
# <details><summary>Hint 2 — the pair indices per layout</summary>
#
# For lane $i$, which two elements of the row form pair $i$? For $D = 8$, §5's picture: half-split pairs
# $(0, 4), (1, 5), (2, 6), (3, 7)$ and interleaved $(0, 1), (2, 3), (4, 5), (6, 7)$. Write each as two expressions
# in `i` and `half`, chosen by `INTERLEAVED`. The rotated pair goes back to the same two places. A check that says
# `wrong-values` and names a layout saw the other layout's pairs: which branch gave which indices?
#
# </details>
#
# <details><summary>Hint 3 — what BACKWARD changes</summary>
#
# Part D found the backward: a rotation again, by which angle? Of the two loaded tables, which one changes when the
# angle changes sign, and how? That is the whole difference between the two launches — one line under
# `if BACKWARD:`, before the same loads, arithmetic and stores. A check that says `transpose` saw the backward launch
# rotate by $+\theta$: the forward again. By hand at $\theta = 90°$ with $\bar y = (1, 0)$: the backward launch must
# store $(0, -1)$.
#
# </details>
# %% test id=test_rope_kernel points=3
"""rope_kernel: forward against rope_forward and backward against its autograd,
both layouts, D/2 not a power of two, NaN-padded rows, float64 and float32;
nothing written outside the output; a float64 gradcheck: the backward launch
against the derivative of the forward launch, in each layout."""
course.selfcheck.rope_kernel(rope_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.rope_kernel(rope_kernel)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# Lane $i$ takes elements $(i, i + D/2)$, or $(2i, 2i + 1)$ when `INTERLEAVED`, of row $r$ at `row * stride`, loads
# both under `inside`, and stores
#
# $$\boxed{\;y_1 = x_1 \cos\theta - x_2 \sin\theta, \qquad y_2 = x_2 \cos\theta + x_1 \sin\theta, \qquad
# \sin\theta \to -\sin\theta \text{ when BACKWARD}\;}$$
#
# to the same two places of $Y$. One code serves both directions because $R(\theta)^\top = R(-\theta)$; the
# constexpr `if` is resolved when Triton compiles, so each launch runs a kernel without a branch. Per row the kernel
# reads $D$ elements and $D/2$ cosines and sines each (cached: every head reads the
# same table) and writes $D$.
#
# </details>
# %% [markdown]
# ## 6 · RoPE in training: one kernel, both directions
#
# Your kernel in a `torch.autograd.Function`: the forward launches it, the backward launches it again with
# `backward=True`. It saves only `cos` and `sin`. The cell below runs it forward and backward on $B = 2$, $H = 3$,
# $T = 37$, $D = 40$ ($D/2 = 20$, no power of two), both layouts, against autograd through the given
# `rope_forward`; then it counts what autograd's backward of `rope_forward` moves, as §4 did for SwiGLU. The kernel
# is used once it passes Part E's check, which runs it on padded buffers first.
# %%
class RoPE(torch.autograd.Function):
    """RoPE by your rope_kernel, forward and backward; saves only the angle table."""

    @staticmethod
    def forward(ctx, x, cos, sin, interleaved=False):
        ctx.save_for_backward(cos, sin)
        ctx.interleaved = interleaved
        return rope_apply(x, cos, sin, interleaved)

    @staticmethod
    def backward(ctx, dy):
        cos, sin = ctx.saved_tensors
        return rope_apply(dy, cos, sin, ctx.interleaved, backward=True), None, None, None


if when_passing("rope_kernel", "E"):
    dtype = F64 if course.INTERPRETED else torch.float32
    gen = torch.Generator().manual_seed(16)
    cos, sin = rope_angles(37, 40, dtype=dtype)  # (T, D/2) each
    for interleaved in (False, True):
        x, dy = (torch.randn(2, 3, 37, 40, generator=gen).to(DEVICE, dtype) for _ in range(2))  # (B, H, T, D)
        mine, theirs = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        y_mine, y_ref = RoPE.apply(mine, cos, sin, interleaved), rope_forward(theirs, cos, sin, interleaved)
        (dx_mine,), (dx_ref,) = torch.autograd.grad(y_mine, mine, dy), torch.autograd.grad(y_ref, theirs, dy)
        print(f"interleaved={interleaved}: RoPE against autograd through rope_forward, relative errors: "
              f"y {course.relative_error(y_mine, y_ref):.0e}, x̄ {course.relative_error(dx_mine, dx_ref):.0e}")

x = torch.randn(2, 3, 37, 40, requires_grad=True)  # float32, on the CPU: only the bytes are counted
cos32, sin32 = rope_angles(37, 40, dtype=torch.float32, device="cpu")
y = rope_forward(x, cos32, sin32)
with Traffic() as traffic:
    torch.autograd.grad(y, x, torch.ones_like(y))
moved = sum(r + w for _, r, w in traffic.ops) / (x.numel() * x.element_size())
print(f"autograd's backward of rope_forward: {len(traffic.ops)} ops, {moved:.1f} passes over x "
      f"(the kernel: 2, plus the small angle table)")

# %% [markdown]
# Both layouts agree with autograd to their dtype's rounding, forward and backward, from one kernel. Autograd's
# backward of `rope_forward` runs a dozen small ops — the products, the sums, and for each half a zero-filled
# full-width buffer that the slice's backward writes into, then one more sum — and moves many times what the kernel
# moves: $\bar y$ read once, $\bar x$ written once. Liger-Kernel's and Unsloth's RoPE kernels are this one, with `BACKWARD` as a
# flag of the launch.
#
# ## What to take away
#
# - **Elementwise backwards are one multiply by $f'$ — the work is $f'$, and from which tensor.** GELU's slope is
#   $\Phi + x\varphi$ (the derivative of a CDF is its density); its tanh form differs by at most
#   $8.7 \cdot 10^{-4}$, at $x = \pm 2.02$: small, but a backward must match its forward's form.
# - **SwiGLU's backward needs the pre-activation $a$, not the output.** SiLU is not one-to-one, so
#   $\operatorname{silu}'$ cannot be read from $h$ or $\operatorname{silu}(a)$. Autograd keeps four $(T, F)$ tensors;
#   saving $a$ and $b$ keeps two (14.0 GiB instead of 28.0 for Llama-3-8B at $T = 8{,}192$) at no extra FLOPs;
#   recomputing $a$ and $b$ keeps none for 22% more MLP FLOPs; saving $h$ and recomputing is never worth it.
# - **Fusion is counted in passes over memory.** A fused SwiGLU backward reads three tensors and writes two — 5 passes
#   against autograd's 9 and an op-by-op backward's twenty-odd — and computes in float32 between a float16 load and a
#   float16 store, one rounding per output.
# - **The backward of a rotation is the rotation back.** RoPE's Jacobian is $R(\theta)$, its VJP $R(\theta)^\top =
#   R(-\theta)$: the forward with $-\sin\theta$, one kernel with a `BACKWARD` flag, and nothing saved but the angle
#   table. Which features pair — $(i, i + D/2)$ or $(2i, 2i + 1)$ — is a convention the weights were trained with.
#
# This is the course's last notebook so far. Notebooks 00–11 cover the backward of every op in a Llama-style layer —
# matmuls, softmax, normalization, attention as it is trained, the MLP's gate, RoPE — and how each becomes a kernel
# that moves as few bytes as it must. A natural next step is to put them together: one transformer layer whose
# forward and backward run on your kernels alone, checked against PyTorch end to end.
