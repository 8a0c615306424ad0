"""The LM head's loss, fused: cross-entropy of h Wᵀ against targets, never holding the T×V logits.

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

The options a trainer uses (as in kernels.cross_entropy, whose docstring derives each term and its
gradient w.r.t. the logits; the kernel here runs the same row functions):
- ``bias`` b (V,): z = h Wᵀ + b (one addmm per chunk); b̄ = Σ_rows z̄, summed over the chunks in
  float32 (float64 for float64). Traffic: V per chunk read, and V per chunk for b̄'s sum.
- ``reduction`` 'mean' | 'sum' | 'none'; ``ce_weight`` (V,) class weights (the name keeps them apart
  from W); ``label_smoothing`` ε; z-loss ``lse_square_scale`` s and ``return_z_loss``; ``softcap`` c.
  None of them adds a pass over the chunk's logits; class weights with label smoothing read V
  weights per row.
For 'mean' and 'sum' the gradients are computed in the forward as above. For 'none' (a gradient per
row that only the backward knows) and when the returned z-loss receives a gradient of its own, the
forward computes no gradient and the backward sweeps the chunks again with the gradient each row
receives: the third matmul over T·V·d, and h, W, bias and target saved (references, no copies).

Autocast: under ``torch.autocast`` h, W and bias are cast to the autocast dtype as F.linear casts them
(float64 stays), so the matmuls run in that dtype as an unfused ``linear`` would; the loss is computed
from the chunk's logits in float32 and returned in float32, as ``F.cross_entropy`` (on autocast's
float32 list) returns it. Inside, autocast is off: the chunk's logits, h̄ and the matmuls' outputs
share the inputs' dtype (with autocast left on, ``torch.mm(z̄, W, out=h̄)`` met half logits and a float32
h̄ and refused them). The gradients reach the float32 leaves through the casts' own backward.

Limitations: h must be 2-D (flatten batch and sequence first) and W (and bias) must have h's dtype;
float16/float32/float64 everywhere, bfloat16 on a GPU. The chunk's logits and their gradient
are held in the input dtype (as an unfused matmul would produce them); statistics and the
loss in float32 (float64 for float64). For half inputs each chunk's W̄ matmul is rounded to
the input dtype before it is added to the float32 sum (a V×d temporary per chunk). Target
values are checked on the host, and the valid rows counted there: a device synchronisation.
All-ignored targets give a NaN loss (0/0) and zero gradients, as PyTorch's mean does.
The class weights get no gradient.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._common import acc_dtype, acc_torch_dtype, autocast_to_lower, check_floating, looped_block, row_launch
from .cross_entropy import LossOptions, load_params, loss_options, reduce_rows, row_backward, row_gradients, row_loss_terms


@triton.jit
def _linear_ce_chunk_kernel(
    Z_ptr,  # (n_rows, n_cols) the chunk's logits in; their gradient out, in place (with GRAD)
    T_ptr,  # (n_rows,) int64 targets
    W_ptr,  # (n_cols,) class weights in ACC (unused without HAS_WEIGHT)
    LOSS_ptr,  # (n_rows,) per-row cross-entropy term out, 0 where ignored
    ZLOSS_ptr,  # (n_rows,) per-row z-loss term out, 0 where ignored
    G_ptr,  # gradient reaching each row's cross-entropy term (row i at i·g_stride: stride 0 broadcasts)
    GZ_ptr,  # gradient reaching each row's z-loss term (row i at i·gz_stride)
    z_row_stride,
    g_stride,
    gz_stride,
    n_cols,
    ignore_index,
    P_ptr,  # (4,) in ACC: label smoothing ε, lse_square_scale, softcap, Σ_j w_j
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr,
    GRAD: tl.constexpr,  # write z̄ over z; off for a forward whose gradient is not computed there
):
    """The row's loss terms from one sweep (kernels.cross_entropy's), then, with GRAD, z ← z̄ in place."""
    row = tl.program_id(0).to(tl.int64)
    z_row = Z_ptr + row * z_row_stride
    t = tl.load(T_ptr + row)
    ignored = t == ignore_index
    eps, z_scale, softcap, weight_sum = load_params(P_ptr, ACC)
    # Sweep 1; the target's logit is read before sweep 2 overwrites it.
    ce, zl, lse = row_loss_terms(z_row, W_ptr, t, ignored, n_cols, eps, z_scale, softcap, weight_sum,
                                 BLOCK, ACC, HAS_SOFTCAP, HAS_WEIGHT, HAS_SMOOTHING)
    tl.store(LOSS_ptr + row, ce)
    tl.store(ZLOSS_ptr + row, zl)
    if GRAD:
        # Sweep 2: the gradient, written over the logits it came from.
        row_backward(z_row, z_row, W_ptr, t, ignored, lse, tl.load(G_ptr + row * g_stride).to(ACC),
                     tl.load(GZ_ptr + row * gz_stride).to(ACC), eps, z_scale, softcap, weight_sum, n_cols,
                     BLOCK, ACC, HAS_SOFTCAP, HAS_WEIGHT, HAS_SMOOTHING)


def default_chunk(n_tokens: int, vocab: int, dim: int) -> int:
    """Rows per chunk such that the chunk's logits (chunk × V) hold about as many numbers as h (T × d).

    A power of two, at least 1 and at most the next power of two above T.
    """
    rows = max(1, math.ceil(n_tokens * dim / max(vocab, 1)))
    return triton.next_power_of_2(min(rows, max(n_tokens, 1)))


def _check_inputs(h: torch.Tensor, W: torch.Tensor, target: torch.Tensor, ignore_index: int, chunk, bias=None,
                  reduction: str = "mean") -> None:
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
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    n_classes = W.shape[0]
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"bias must be a torch.Tensor of shape ({n_classes},) or None, got {type(bias).__name__}")
        if tuple(bias.shape) != (n_classes,):
            raise ValueError(f"bias must have shape ({n_classes},), one per row of W; got {tuple(bias.shape)}")
        if bias.device != h.device:
            raise ValueError(f"bias is on {bias.device} but h is on {h.device}; put h, W, bias and target on one device")
        if bias.dtype != h.dtype:
            raise TypeError(f"bias has dtype {str(bias.dtype).removeprefix('torch.')} but h has "
                            f"{str(h.dtype).removeprefix('torch.')}; give h, W and bias the same dtype")
    out_of_range = ((target < 0) | (target >= n_classes)) & (target != ignore_index)
    if bool(out_of_range.any()):
        bad = target[out_of_range][0].item()
        raise ValueError(f"target holds {bad}, outside [0, {n_classes}) (W's rows) and not ignore_index={ignore_index}")


def _sweep(h, W, bias, target, ignore_index: int, chunk: int, options: LossOptions, g, gz, *, grad: bool,
           need_dh: bool, need_dW: bool, need_db: bool):
    """The chunk loop: per chunk z = h_c Wᵀ (+ b), the kernel's loss terms and, with ``grad``, z̄ in place, then
    h̄_c = z̄ W, W̄ += z̄ᵀ h_c and b̄ += Σ_rows z̄ (sums in float32, float64 for float64).
    Returns (per-row cross-entropy terms, per-row z-loss terms, h̄, W̄, b̄), a gradient None where not asked for."""
    n_tokens, vocab = h.shape[0], W.shape[0]
    stats = acc_torch_dtype(h.dtype)
    row_ce = torch.zeros(n_tokens, dtype=stats, device=h.device)
    row_z = torch.zeros(n_tokens, dtype=stats, device=h.device)
    dh = torch.empty_like(h, memory_format=torch.contiguous_format) if grad and need_dh else None
    dW_sum = torch.zeros(W.shape, dtype=stats, device=W.device) if grad and need_dW else None
    db_sum = torch.zeros(vocab, dtype=stats, device=W.device) if grad and need_db else None
    block = row_launch(vocab, loop_block=looped_block()).block
    w_ptr, params = options.kernel_args(row_ce)
    g_stride, gz_stride = int(g.numel() > 1), int(gz.numel() > 1)
    for start in range(0, n_tokens, chunk):
        rows = min(chunk, n_tokens - start)
        # narrow, not h[a:b]: the compile check's fake CUDA tensors take no Python slice on a CPU build of torch
        h_c = h.narrow(0, start, rows)
        z = h_c @ W.T if bias is None else torch.addmm(bias, h_c, W.T)  # (rows, V): the only logits that ever exist
        _linear_ce_chunk_kernel[(rows,)](
            z, target.narrow(0, start, rows), w_ptr, row_ce.narrow(0, start, rows), row_z.narrow(0, start, rows),
            g.narrow(0, start, rows) if g_stride else g, gz.narrow(0, start, rows) if gz_stride else gz,
            z.stride(0), g_stride, gz_stride, vocab, ignore_index, params,
            BLOCK=block, ACC=acc_dtype(h.dtype), GRAD=grad, **options.constexprs(),
        )
        # With grad, z now holds the chunk's z̄.
        if dh is not None:
            torch.mm(z, W, out=dh.narrow(0, start, rows))
        if dW_sum is not None:
            if z.dtype == stats:
                dW_sum.addmm_(z.T, h_c)
            else:
                dW_sum += z.T @ h_c  # half inputs: the chunk's product, then the float32 sum
        if db_sum is not None:
            db_sum += z.sum(0, dtype=stats)
        del z
    dW = dW_sum.to(W.dtype) if dW_sum is not None else None
    db = db_sum.to(bias.dtype) if db_sum is not None else None
    return row_ce, row_z, dh, dW, db


def _setup(h, W, target, ignore_index, chunk, bias, reduction, options):
    _check_inputs(h, W, target, ignore_index, chunk, bias, reduction)
    n_tokens, dim = h.shape
    chunk = min(chunk or default_chunk(n_tokens, W.shape[0], dim), max(n_tokens, 1))
    options = options or loss_options(W.shape[0], h)
    return chunk, target.contiguous(), options  # the kernel reads one index per row at a unit stride


def fused_linear_cross_entropy_forward(h: torch.Tensor, W: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                                       chunk: int | None = None, need_dh: bool = True, need_dW: bool = True, *,
                                       bias: torch.Tensor | None = None, reduction: str = "mean",
                                       options: LossOptions | None = None, need_db: bool = True):
    """(loss, z-loss, h̄, W̄, b̄): the reduced loss and z-loss term in float32 (float64 for float64), and, for 'mean'
    and 'sum', the loss's gradients for a unit upstream gradient (None where not needed, and always for 'none')."""
    chunk, target, options = _setup(h, W, target, ignore_index, chunk, bias, reduction, options)
    n_valid, denom = options.denominator(target, ignore_index)
    stats = acc_torch_dtype(h.dtype)
    grad = reduction != "none" and (need_dh or need_dW or (need_db and bias is not None))
    one = torch.ones((), dtype=stats, device=h.device)
    g, gz = row_gradients(one, None, reduction, n_valid, denom, one)
    row_ce, row_z, dh, dW, db = _sweep(h, W, bias, target, ignore_index, chunk, options, g, gz, grad=grad,
                                       need_dh=need_dh, need_dW=need_dW, need_db=need_db and bias is not None)
    loss, z_loss = reduce_rows(row_ce, row_z, reduction, n_valid, denom)
    return loss, z_loss, dh, dW, db


def fused_linear_cross_entropy_backward(h, W, target, g, gz, ignore_index: int = -100, chunk: int | None = None, *,
                                        bias=None, options: LossOptions | None = None, need_dh: bool = True,
                                        need_dW: bool = True, need_db: bool = True):
    """(h̄, W̄, b̄) for the gradients ``g`` and ``gz`` reaching each row's cross-entropy and z-loss terms ((T,) or one
    element for every row), the chunks' logits recomputed: the backward of 'none' and of a used z-loss output."""
    chunk, target, options = _setup(h, W, target, ignore_index, chunk, bias, "none", options)
    _, _, dh, dW, db = _sweep(h, W, bias, target, ignore_index, chunk, options, g, gz, grad=True, need_dh=need_dh,
                              need_dW=need_dW, need_db=need_db and bias is not None)
    return dh, dW, db


class FusedLinearCrossEntropyFunction(torch.autograd.Function):
    """For 'mean' and 'sum', computes h̄, W̄, b̄ in the forward (the logits are gone by the backward) and scales
    them in the backward; for 'none', or when the returned z-loss gets a gradient of its own, the backward
    sweeps the chunks again with the gradient each row receives."""

    @staticmethod
    def forward(ctx, h, W, bias, target, ignore_index, chunk, reduction, options, return_z_loss, grad_enabled, out_dtype):
        ctx.set_materialize_grads(False)
        # needs_input_grad says only whether h, W and bias require grad; under torch.no_grad() nothing is needed.
        need = [grad_enabled and n for n in ctx.needs_input_grad[:3]]
        with torch.autocast(h.device.type, enabled=False):  # the matmuls run in the dtype the inputs came in
            loss, z_loss, dh, dW, db = fused_linear_cross_entropy_forward(
                h, W, target, ignore_index, chunk, need[0], need[1], bias=bias, reduction=reduction, options=options,
                need_db=need[2])
        sweep_again = any(need) and (reduction == "none" or return_z_loss)
        ctx.save_for_backward(dh, dW, db, *((h, W, bias, target) if sweep_again else ()))
        n_valid, denom = options.denominator(target, ignore_index)
        ctx.args = (ignore_index, chunk, reduction, options, n_valid, denom, need)
        return (loss.to(out_dtype), z_loss.to(out_dtype)) if return_z_loss else loss.to(out_dtype)

    @staticmethod
    def backward(ctx, grad_loss, grad_z=None):
        ignore_index, chunk, reduction, options, n_valid, denom, need = ctx.args
        dh, dW, db, *inputs = ctx.saved_tensors
        if grad_loss is None and grad_z is None:  # neither output reached the loss being differentiated
            dh = dW = db = None
        elif reduction != "none" and grad_z is None:
            # Out of place: the saved gradients stay as they are for a second backward (retain_graph).
            dh, dW, db = (None if t is None else t * grad_loss.to(t.dtype) for t in (dh, dW, db))
        else:
            h, W, bias, target = inputs
            stats = acc_torch_dtype(h.dtype)
            g, gz = row_gradients(grad_loss, grad_z, reduction, n_valid, denom, torch.empty((), dtype=stats, device=h.device))
            with torch.autocast(h.device.type, enabled=False):
                dh, dW, db = fused_linear_cross_entropy_backward(h, W, target, g, gz, ignore_index, chunk, bias=bias,
                                                                 options=options, need_dh=need[0], need_dW=need[1],
                                                                 need_db=need[2])
        return dh, dW, db, None, None, None, None, None, None, None, None


def fused_linear_cross_entropy(h: torch.Tensor, W: torch.Tensor, target: torch.Tensor, *, bias: torch.Tensor | None = None,
                               ignore_index: int = -100, reduction: str = "mean", ce_weight: torch.Tensor | None = None,
                               label_smoothing: float = 0.0, lse_square_scale: float = 0.0, softcap: float | None = None,
                               return_z_loss: bool = False, chunk: int | None = None):
    """Cross-entropy of the logits h Wᵀ + bias against ``target``, without holding them; differentiable in h, W, bias.

    Equals ``F.cross_entropy(z, target, weight=ce_weight, ignore_index=, reduction=, label_smoothing=)`` plus
    the z-loss (``lse_square_scale``·lse² per valid row, reduced like the loss; returned too with
    ``return_z_loss=True``), where z = softcap·tanh(l/softcap) of the logits l = h @ W.T + bias when ``softcap``
    is given. h (T, d), W (V, d), bias (V,), target (T,) int64; rows whose target is ``ignore_index`` add
    nothing and do not count in the mean. ``ce_weight`` (V,): class weights (named so as not to be taken for
    W). ``chunk``: tokens per chunk (default: about T·d/V, so the chunk's logits are h's size).
    Under torch.autocast the matmuls run in the autocast dtype and the loss comes back in float32.
    """
    out_dtype = None
    if isinstance(h, torch.Tensor) and isinstance(W, torch.Tensor):
        if torch.is_autocast_enabled(h.device.type) and h.dtype != torch.float64:
            out_dtype = torch.float32
        h, W, bias = autocast_to_lower(h, W, bias)
        _check_inputs(h, W, target, ignore_index, chunk, bias, reduction)
    else:
        _check_inputs(h, W, target, ignore_index, chunk, bias, reduction)  # names the argument that is not a tensor
    options = loss_options(W.shape[0], h, label_smoothing=label_smoothing, lse_square_scale=lse_square_scale,
                           softcap=softcap, weight=ce_weight, weight_name="ce_weight", like_name="h")
    return FusedLinearCrossEntropyFunction.apply(h, W, bias, target, ignore_index, chunk, reduction, options,
                                                 bool(return_z_loss), torch.is_grad_enabled(), out_dtype or h.dtype)
