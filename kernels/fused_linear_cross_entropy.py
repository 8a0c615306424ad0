"""The LM head's loss, fused: mean cross-entropy of h Wᵀ against targets, never holding the T×V logits.

For h (T, d), W (V, d) and target (T,) of class indices:
    loss = (1/M) Σ_{i valid} (lse_i − z_{i,t_i}),   z = h Wᵀ,  lse_i = log Σ_j exp z_ij
    z̄    = (softmax(z) − onehot(t)) / M            (zero on ignored rows)
    h̄    = z̄ W,   W̄ = z̄ᵀ h
where M counts the rows whose target is not ``ignore_index``. Unfused, autograd keeps z
(T×V) for the backward and builds z̄ (T×V) again in it: at T = 8192 and a 128,256-word
vocabulary that is 4.2 GB each in float32, the largest tensors of LLM training.

Here the tokens are walked in chunks of C rows. Per chunk: z_c = h_c Wᵀ (C×V) by one matmul;
one Triton kernel takes each row's log-sum-exp with an online max and sum over blocks of the
vocabulary, writes the row's loss, and then overwrites z_c with z̄_c in place (the logits are
not needed once their log-sum-exp is known: Liger-Kernel's trick); then h̄_c = z̄_c W and
W̄ += z̄_cᵀ h_c, the sum across chunks kept in float32 (float64 for float64); z_c is dropped
before the next chunk. Extra memory: C×V for the chunk, plus h̄ and W̄ (the size of the
inputs) — never T×V. The default chunk is T·d/V rounded up to a power of two (at least 1
row): the chunk's logits hold about as many numbers as h (at most twice, once T·d ≥ V).

Design choice — the gradients are computed in the forward. The chunk's logits exist only
inside the forward's loop, so the forward computes h̄ and W̄ for a unit upstream gradient
and saves them; the backward only scales them by the incoming scalar. The cost: the
forward does the backward's two matmuls (a forward alone — evaluation under
``torch.no_grad()``, or inputs that need no gradient — skips them: only the gradients
autograd can ask for are computed); h̄ and W̄ (T·d + V·d numbers) stay alive from
the forward to the backward; and the backward makes one scaled copy of each, so that a
second backward through a retained graph gets the same answer. The alternative, recomputing
each chunk's logits in the backward, costs a third matmul over T·V·d instead.

Limitations: h must be 2-D (flatten batch and sequence first) and W must have h's dtype;
float16/float32/float64 everywhere, bfloat16 on a GPU. The chunk's logits and their gradient
are held in the input dtype (as an unfused matmul would produce them); statistics and the
loss in float32 (float64 for float64). For half inputs each chunk's W̄ matmul is rounded to
the input dtype before it is added to the float32 sum (a V×d temporary per chunk). Target
values are checked on the host, and the valid rows counted there: a device synchronisation.
All-ignored targets give a NaN loss (0/0) and zero gradients, as PyTorch's mean does.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._common import acc_dtype, acc_torch_dtype, check_floating, looped_block, row_launch
from .cross_entropy import row_logsumexp


@triton.jit
def _linear_ce_chunk_kernel(
    Z_ptr,  # (n_rows, n_cols) the chunk's logits in; their gradient out, in place
    T_ptr,  # (n_rows,) int64 targets
    LOSS_ptr,  # (n_rows,) per-row loss out, 0 where ignored
    z_row_stride,
    n_cols,
    ignore_index,
    n_valid,  # rows of the whole batch that count in the mean: the gradient's 1/M
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,
):
    """loss = lse − z_t from an online max/sum over the row, then z ← (softmax(z) − onehot(t)) / M in place."""
    row = tl.program_id(0).to(tl.int64)
    z_row = Z_ptr + row * z_row_stride
    cols = tl.arange(0, BLOCK)
    t = tl.load(T_ptr + row)
    ignored = t == ignore_index
    lse = row_logsumexp(z_row, n_cols, BLOCK, ACC)  # sweep 1: cross_entropy's online max and sum
    # The target's logit is read before sweep 2 overwrites it.
    z_t = tl.load(z_row + tl.where(ignored, 0, t)).to(ACC)
    tl.store(LOSS_ptr + row, tl.where(ignored, 0.0, lse - z_t))
    # Sweep 2: the gradient of the mean loss, written over the logits it came from.
    g = tl.where(ignored, 0.0, tl.full([], 1.0, ACC) / n_valid)
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        mask = offs < n_cols
        z = tl.load(z_row + offs, mask=mask, other=0.0).to(ACC)
        dz = g * (tl.exp(z - lse) - tl.where(offs == t, 1.0, 0.0))
        tl.store(z_row + offs, dz.to(Z_ptr.dtype.element_ty), mask=mask)


def default_chunk(n_tokens: int, vocab: int, dim: int) -> int:
    """Rows per chunk such that the chunk's logits (chunk × V) hold about as many numbers as h (T × d).

    A power of two, at least 1 and at most the next power of two above T.
    """
    rows = max(1, math.ceil(n_tokens * dim / max(vocab, 1)))
    return triton.next_power_of_2(min(rows, max(n_tokens, 1)))


def _check_inputs(h: torch.Tensor, W: torch.Tensor, target: torch.Tensor, ignore_index: int, chunk) -> None:
    for name, t in (("h", h), ("W", W)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 2:
            what = "(tokens, features): flatten batch and sequence first" if name == "h" else "(vocabulary, features)"
            raise ValueError(f"{name} must be 2-D {what}; got shape {tuple(t.shape)}")
    if h.shape[1] != W.shape[1]:
        raise ValueError(f"h has {h.shape[1]} features per token but W has {W.shape[1]} per vocabulary row "
                         f"(h is {tuple(h.shape)}, W is {tuple(W.shape)}; W must be (V, {h.shape[1]}))")
    if h.shape[1] == 0:
        raise ValueError("h and W have 0 features; there is nothing to project")
    if W.shape[0] == 0:
        raise ValueError("W has 0 rows: a vocabulary of no classes has no cross-entropy")
    # Devices before dtypes: check_floating would call a tensor off the GPU "on the CPU".
    if W.device != h.device:
        raise ValueError(f"W is on {W.device} but h is on {h.device}; put h, W and target on one device")
    check_floating("h", h)
    check_floating("W", W)
    if W.dtype != h.dtype:
        raise TypeError(f"W has dtype {str(W.dtype).removeprefix('torch.')} but h has "
                        f"{str(h.dtype).removeprefix('torch.')}; give both the same dtype")
    if not isinstance(target, torch.Tensor) or target.dtype != torch.int64:
        got = target.dtype if isinstance(target, torch.Tensor) else type(target).__name__
        raise TypeError(f"target must be an int64 tensor of class indices, got {got}")
    if tuple(target.shape) != (h.shape[0],):
        raise ValueError(f"target has shape {tuple(target.shape)} but h has {h.shape[0]} tokens: "
                         f"target must be ({h.shape[0]},), one class index per token")
    if target.device != h.device:
        raise ValueError(f"target is on {target.device} but h is on {h.device}; put h, W and target on one device")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"ignore_index must be an int, got {type(ignore_index).__name__}")
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
        raise ValueError(f"chunk must be a positive int (rows per chunk) or None for the default, got {chunk!r}")
    n_classes = W.shape[0]
    out_of_range = ((target < 0) | (target >= n_classes)) & (target != ignore_index)
    if bool(out_of_range.any()):
        bad = target[out_of_range][0].item()
        raise ValueError(f"target holds {bad}, outside [0, {n_classes}) (W's rows) and not ignore_index={ignore_index}")


def fused_linear_cross_entropy_forward(h: torch.Tensor, W: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                                       chunk: int | None = None, need_dh: bool = True, need_dW: bool = True):
    """(loss, h̄, W̄): the mean loss in h's dtype, and its gradients for a unit upstream gradient (None where not needed)."""
    _check_inputs(h, W, target, ignore_index, chunk)
    n_tokens, dim = h.shape
    vocab = W.shape[0]
    chunk = min(chunk or default_chunk(n_tokens, vocab, dim), max(n_tokens, 1))
    target = target.contiguous()  # the kernel reads one index per row at a unit stride
    n_valid = int((target != ignore_index).sum())
    stats = acc_torch_dtype(h.dtype)
    row_loss = torch.zeros(n_tokens, dtype=stats, device=h.device)
    dh = torch.empty_like(h, memory_format=torch.contiguous_format) if need_dh else None
    dW_sum = torch.zeros(W.shape, dtype=stats, device=W.device) if need_dW else None
    block = row_launch(vocab, loop_block=looped_block()).block
    for start in range(0, n_tokens, chunk):
        rows = min(chunk, n_tokens - start)
        # narrow, not h[a:b]: the compile check's fake CUDA tensors take no Python slice on a CPU build of torch
        h_c = h.narrow(0, start, rows)
        z = h_c @ W.T  # (rows, V): the only logits that ever exist
        # With no valid row every row is ignored and no 1/M is used: any divisor will do.
        _linear_ce_chunk_kernel[(rows,)](z, target.narrow(0, start, rows), row_loss.narrow(0, start, rows), z.stride(0),
                                         vocab, ignore_index, max(n_valid, 1), BLOCK=block, ACC=acc_dtype(h.dtype))
        # z now holds the chunk's z̄.
        if dh is not None:
            torch.mm(z, W, out=dh.narrow(0, start, rows))
        if dW_sum is not None:
            if z.dtype == stats:
                dW_sum.addmm_(z.T, h_c)
            else:
                dW_sum += z.T @ h_c  # half inputs: the chunk's product, then the float32 sum
        del z
    loss = (row_loss.sum() / n_valid if n_valid else row_loss.sum() / 0.0).to(h.dtype)  # 0/0 = NaN, as torch
    dW = dW_sum.to(W.dtype) if dW_sum is not None else None
    return loss, dh, dW


class FusedLinearCrossEntropyFunction(torch.autograd.Function):
    """Computes h̄ and W̄ in the forward (the logits are gone by the backward) and scales them in the backward."""

    @staticmethod
    def forward(ctx, h, W, target, ignore_index, chunk, grad_enabled):
        # needs_input_grad says only whether h and W require grad; under torch.no_grad() nothing is needed.
        need_dh, need_dW = grad_enabled and ctx.needs_input_grad[0], grad_enabled and ctx.needs_input_grad[1]
        loss, dh, dW = fused_linear_cross_entropy_forward(h, W, target, ignore_index, chunk, need_dh, need_dW)
        ctx.save_for_backward(dh, dW)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        dh, dW = ctx.saved_tensors
        # Out of place: the saved gradients stay as they are for a second backward (retain_graph).
        return (None if dh is None else dh * grad_loss.to(dh.dtype),
                None if dW is None else dW * grad_loss.to(dW.dtype), None, None, None, None)


def fused_linear_cross_entropy(h: torch.Tensor, W: torch.Tensor, target: torch.Tensor, *, ignore_index: int = -100,
                               chunk: int | None = None) -> torch.Tensor:
    """Mean cross-entropy of the logits h Wᵀ against ``target``, without holding them; differentiable in h and W.

    Equals ``F.cross_entropy(h @ W.T, target, ignore_index=ignore_index)``. h (T, d), W (V, d),
    target (T,) int64; rows whose target is ``ignore_index`` add nothing and do not count in the
    mean. ``chunk``: tokens per chunk (default: about T·d/V, so the chunk's logits are h's size).
    """
    return FusedLinearCrossEntropyFunction.apply(h, W, target, ignore_index, chunk, torch.is_grad_enabled())
