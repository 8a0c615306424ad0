"""Rotary position embeddings (RoPE): one Triton kernel for the forward and the backward, behind autograd.

Layout (flash-attn's ``apply_rotary_emb``): x is (..., T, H, D) — queries or keys, (B, T, H, D) or
(T, H, D) — with any strides, so (B, H, T, D) tensors go in as ``x.transpose(1, 2)`` without a copy.
cos and sin are (T_max, D/2) with T_max ≥ T, rows 0..T−1 used: the angle θ of pair i at position t is
read from cos[t, i] and sin[t, i].

Each position t rotates D/2 pairs (x₁, x₂) of every head by θ[t, i]:
    y₁ = x₁·cos θ − x₂·sin θ,   y₂ = x₂·cos θ + x₁·sin θ
The pairs are (i, i + D/2) by default (half-split, GPT-NeoX and Llama) and (2i, 2i + 1) with
``interleaved=True`` (GPT-J).

The backward is the same kernel with sin negated (constexpr BACKWARD): a rotation's Jacobian is the
rotation matrix R(θ), and the vector-Jacobian product ȳ·R(θ) = R(θ)ᵀ ȳ = R(−θ) ȳ, the rotation by −θ.
The autograd Function saves only cos and sin. They are treated as constants: no gradient flows to them.

One program rotates BLOCK_H heads of one position: cos and sin are loaded once for them. The output
has x's shape and dtype (cos and sin may be float32 beside half x); arithmetic is float32 for half
inputs (float64 for float64). torch.autocast changes nothing here (PyTorch's own RoPE, muls and adds,
is on no autocast list). Float16, float32 and float64 on the CPU interpreter; bfloat16 on a GPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import acc_dtype, check_floating, interpreted

# Elements of one half (BLOCK_H heads × D/2 pairs) a program holds: 1024 on a GPU (with x₁, x₂, cos
# and sin live, 8 pairs a thread at 4 warps); more in the interpreter, where each program costs Python work.
GPU_TILE = 1024
INTERPRETER_TILE = 8192


@triton.jit
def _rope_kernel(
    X_ptr,  # (N, T, H, D) input: x, or ȳ for the backward
    Y_ptr,  # (N, T, H, D) output: y, or x̄
    Cos_ptr, Sin_ptr,  # (T_max, D/2) each
    seq_len, n_heads, half,  # T, H, D/2
    x_stride_n, x_stride_t, x_stride_h, x_stride_d,
    y_stride_n, y_stride_t, y_stride_h, y_stride_d,
    cs_stride_t, cs_stride_i,  # cos and sin share their strides
    INTERLEAVED: tl.constexpr,  # pairs (2i, 2i + 1) rather than (i, i + D/2)
    BACKWARD: tl.constexpr,  # rotate by −θ
    BLOCK_H: tl.constexpr,
    BLOCK_P: tl.constexpr,  # ≥ D/2, a power of two
    ACC: tl.constexpr,
):
    """Rotate every pair of BLOCK_H heads at one position (program 0 over N·T positions, program 1 over head blocks)."""
    pos = tl.program_id(0)
    n = (pos // seq_len).to(tl.int64)
    t = pos % seq_len
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    pairs = tl.arange(0, BLOCK_P)
    mask = (heads < n_heads)[:, None] & (pairs < half)[None, :]
    if INTERLEAVED:
        first, second = 2 * pairs, 2 * pairs + 1
    else:
        first, second = pairs, pairs + half
    cos = tl.load(Cos_ptr + t * cs_stride_t + pairs * cs_stride_i, mask=pairs < half, other=0.0).to(ACC)[None, :]
    sin = tl.load(Sin_ptr + t * cs_stride_t + pairs * cs_stride_i, mask=pairs < half, other=0.0).to(ACC)[None, :]
    if BACKWARD:
        sin = -sin
    x_row = X_ptr + n * x_stride_n + t.to(tl.int64) * x_stride_t + heads[:, None].to(tl.int64) * x_stride_h
    y_row = Y_ptr + n * y_stride_n + t.to(tl.int64) * y_stride_t + heads[:, None].to(tl.int64) * y_stride_h
    x1 = tl.load(x_row + first[None, :] * x_stride_d, mask=mask, other=0.0).to(ACC)
    x2 = tl.load(x_row + second[None, :] * x_stride_d, mask=mask, other=0.0).to(ACC)
    tl.store(y_row + first[None, :] * y_stride_d, (x1 * cos - x2 * sin).to(Y_ptr.dtype.element_ty), mask=mask)
    tl.store(y_row + second[None, :] * y_stride_d, (x2 * cos + x1 * sin).to(Y_ptr.dtype.element_ty), mask=mask)


def check_rope_args(x, cos, sin, interleaved) -> None:
    """x (..., T, H, D) with D even; cos and sin (T_max ≥ T, D/2) on x's device; interleaved a bool."""
    if isinstance(x, torch.Tensor) and x.ndim < 3:
        raise ValueError(f"x has shape {tuple(x.shape)}; rope takes (..., T, H, D), e.g. (B, T, H, D) — for one head "
                         "add its axis: x.unsqueeze(-2)")
    if isinstance(x, torch.Tensor) and (x.shape[-1] % 2 or x.shape[-1] == 0):
        raise ValueError(f"x's head dim D = {x.shape[-1]}; RoPE rotates pairs of features, so D must be even and ≥ 2")
    check_floating("x", x)
    t, d = x.shape[-3], x.shape[-1]
    for name, c in (("cos", cos), ("sin", sin)):
        if isinstance(c, torch.Tensor) and (c.ndim != 2 or c.shape[1] != d // 2 or c.shape[0] < t):
            raise ValueError(f"{name} has shape {tuple(c.shape)}; it must be (T_max, D/2) with T_max ≥ T = {t} and "
                             f"D/2 = {d // 2}, one angle per position and pair")
        check_floating(name, c)
        if c.device != x.device:
            raise ValueError(f"{name} is on {c.device} but x is on {x.device}")
    if cos.shape != sin.shape:
        raise ValueError(f"sin has shape {tuple(sin.shape)} but must match cos's {tuple(cos.shape)}")
    if not isinstance(interleaved, bool):
        raise TypeError(f"interleaved must be True (pairs 2i, 2i+1, GPT-J) or False (pairs i, i + D/2, GPT-NeoX), "
                        f"got {interleaved!r}")


def _blocks(n_heads: int, half: int) -> tuple[int, int]:
    """(BLOCK_H, BLOCK_P): every pair of a head in one block, as many heads as the tile allows."""
    block_p = triton.next_power_of_2(half)
    tile = INTERPRETER_TILE if interpreted() else GPU_TILE
    return min(triton.next_power_of_2(n_heads), max(1, tile // block_p)), block_p


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False,
           backward: bool = False) -> torch.Tensor:
    """x rotated by θ (by −θ with ``backward``: x̄ from ȳ), a new contiguous tensor of x's shape and dtype."""
    check_rope_args(x, cos, sin, interleaved)
    t, h, d = x.shape[-3:]
    x4 = x.reshape(-1, t, h, d)  # a view whenever the leading dims merge; any strides inside
    y4 = torch.empty(x4.shape, dtype=x.dtype, device=x.device)
    cos, sin = cos.contiguous(), sin.to(cos.dtype).contiguous()  # (T_max, D/2): small
    block_h, block_p = _blocks(h, d // 2)
    if x4.numel():
        _rope_kernel[(x4.shape[0] * t, triton.cdiv(h, block_h))](
            x4, y4, cos, sin, t, h, d // 2, *x4.stride(), *y4.stride(), *cos.stride(),
            INTERLEAVED=interleaved, BACKWARD=backward, BLOCK_H=block_h, BLOCK_P=block_p, ACC=acc_dtype(x.dtype))
    return y4.view(x.shape)


class RoPEFunction(torch.autograd.Function):
    """Saves cos and sin only: the backward rotates ȳ by −θ with the forward's kernel."""

    @staticmethod
    def forward(ctx, x, cos, sin, interleaved):
        ctx.save_for_backward(cos, sin)
        ctx.interleaved = interleaved
        return rotate(x, cos, sin, interleaved)

    @staticmethod
    def backward(ctx, dy):
        cos, sin = ctx.saved_tensors
        return rotate(dy, cos, sin, ctx.interleaved, backward=True), None, None, None


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool = False) -> torch.Tensor:
    """x (..., T, H, D) rotated pairwise by the angles whose cosines and sines cos and sin (T_max, D/2) hold;
    half-split pairs (i, i + D/2) by default, interleaved pairs (2i, 2i + 1) with ``interleaved=True``."""
    check_rope_args(x, cos, sin, interleaved)
    return RoPEFunction.apply(x, cos.detach(), sin.detach(), interleaved)
