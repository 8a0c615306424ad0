"""Fused softmax + cross-entropy: the forward saves one log-sum-exp per row, not the probabilities.

Per row i with logits x (length C) and target t:
    lse_i  = m + log Σ_j exp(x_j − m),  m = max_j x_j
    loss_i = lse_i − x_t
    x̄_j    = g_i · (exp(x_j − lse_i) − 1[j = t])      (softmax − onehot, scaled)
where g_i is the gradient reaching loss_i: ḡ/M for ``reduction="mean"`` (M = rows whose
target is not ``ignore_index``), ḡ for ``"sum"``, ḡ_i for ``"none"``; ignored rows get 0.

The composite never forms log-probabilities, so it cannot produce the −1/y_t blow-up of
an unfused log(softmax) when the softmax saturates. Memory: the forward reads C per row
and writes three scalars (the loss's two terms below, and lse); the backward reads C and writes C,
rebuilding the softmax from lse. The options' four scalars travel as one 4-element tensor in the
accumulation dtype (a Python float would reach a kernel as float32, too coarse for float64).

The options a trainer uses, each as a term of the row loss and its gradient w.r.t. the
logits z (p = softmax(z), lse as above, all in the kernels, forward and backward):

- ``softcap`` c: z = c·tanh(x/c) replaces x before everything below; by the chain rule
  x̄_j = z̄_j · (1 − tanh²(x_j/c)). Traffic: none (the tanh is recomputed from x in the backward).
- class ``weight`` w (C,): the target term becomes w_t·(lse − z_t), gradient w_t·(p − onehot(t)).
  Traffic: one gather of w_t per row (plus the whole w per row with label smoothing).
- ``label_smoothing`` ε, PyTorch's definition (target (1−ε)·onehot + ε/C, with weights as
  ``F.cross_entropy`` weighs them: the smooth part is −(ε/C)·Σ_j w_j log p_j):
      loss_i = (1−ε)·w_t·(lse − z_t) + (ε/C)·(W·lse − Σ_j w_j z_j),   W = Σ_j w_j
      z̄_j    = (1−ε)·w_t·(p_j − 1[j=t]) + (ε/C)·(W·p_j − w_j)
  (w ≡ 1 without weights, so W = C). Σ_j w_j z_j is taken in the forward's one sweep, beside
  the online max and sum. Traffic: none without weights; C weights per row with them.
- z-loss ``lse_square_scale`` s (PaLM; Liger-Kernel's convention): zloss_i = s·lse_i², gradient
  2·s·lse_i·p_j; not weighted by class weights. Traffic: none (lse is already at hand).
Reductions: ``"sum"`` adds rows; ``"mean"`` divides the cross-entropy part by Σ_{valid i} w_{t_i}
(the valid row count without weights, as PyTorch) and the z-loss part by the valid row count
(as Liger-Kernel); ``return_z_loss=True`` also returns the z-loss part, reduced the same way.
The row gradient g_i above becomes two: g_i for the cross-entropy part and g_i^z for the
z-loss part (a second output has its own upstream gradient).

Layout: logits (..., C) with the classes on the LAST axis and target (...) of int64.
(torch.nn.functional.cross_entropy puts classes on axis 1 for inputs above 2-D; for 2-D
inputs the two agree.)

Autocast: ``F.cross_entropy`` is on autocast's float32 list, so under ``torch.autocast`` half
logits are cast to float32 first (float64 stays float64) and the loss comes back in float32;
the cast's own backward hands the gradient back in the logits' dtype.

Limitations: float16/float32/float64 logits everywhere, bfloat16 on a GPU; accumulation in
float32 (float64 for float64 logits). Target values are checked on the host, which costs a
device synchronisation. The class weights get no gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._common import acc_dtype, acc_torch_dtype, autocast_to_float32, check_floating, looped_block, row_launch, rows_view


@triton.jit
def row_logsumexp(row_ptr, n_cols, BLOCK: tl.constexpr, ACC: tl.constexpr):
    """log Σ exp over one row of n_cols values, walked BLOCK at a time with a per-lane running max and rescaled sum
    (online softmax), in ACC: the first sweep of this file's forward and of kernels.fused_linear_cross_entropy."""
    cols = tl.arange(0, BLOCK)
    # The max starts at a huge finite negative, not −inf, so that no lane ever computes −inf − (−inf) = NaN.
    m_vec = tl.full([BLOCK], -1.0e30, dtype=ACC)
    l_vec = tl.zeros([BLOCK], dtype=ACC)
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        x = tl.load(row_ptr + offs, mask=offs < n_cols, other=-float("inf")).to(ACC)
        m_new = tl.maximum(m_vec, x)
        l_vec = l_vec * tl.exp(m_vec - m_new) + tl.exp(x - m_new)
        m_vec = m_new
    m = tl.max(m_vec, axis=0)
    return m + tl.log(tl.sum(l_vec * tl.exp(m_vec - m), axis=0))


@triton.jit
def tanh(u):
    """tanh from one exp, odd by construction: saturates to ±1 for large |u| without inf/inf."""
    e = tl.exp(-2.0 * tl.abs(u))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(u < 0, -t, t)


@triton.jit
def load_logits(row_ptr, offs, mask, softcap, HAS_SOFTCAP: tl.constexpr, ACC: tl.constexpr):
    """The row's logits at offs in ACC, soft-capped (c·tanh(x/c)) when HAS_SOFTCAP; masked lanes read 0."""
    x = tl.load(row_ptr + offs, mask=mask, other=0.0).to(ACC)
    if HAS_SOFTCAP:
        x = softcap * tanh(x / softcap)
    return x


@triton.jit
def row_stats(row_ptr, w_ptr, n_cols, softcap, BLOCK: tl.constexpr, ACC: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
              HAS_WEIGHT: tl.constexpr, HAS_SMOOTHING: tl.constexpr):
    """(lse, Σ_j w_j z_j) of one row's (soft-capped) logits z in one sweep: the online max and sum of
    row_logsumexp, plus the weighted sum label smoothing needs (0 without HAS_SMOOTHING)."""
    cols = tl.arange(0, BLOCK)
    m_vec = tl.full([BLOCK], -1.0e30, dtype=ACC)
    l_vec = tl.zeros([BLOCK], dtype=ACC)
    s_vec = tl.zeros([BLOCK], dtype=ACC)
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        mask = offs < n_cols
        z = load_logits(row_ptr, offs, mask, softcap, HAS_SOFTCAP, ACC)
        if HAS_SMOOTHING:
            if HAS_WEIGHT:
                s_vec += z * tl.load(w_ptr + offs, mask=mask, other=0.0).to(ACC)
            else:
                s_vec += z  # masked lanes read 0
        z = tl.where(mask, z, -float("inf"))
        m_new = tl.maximum(m_vec, z)
        l_vec = l_vec * tl.exp(m_vec - m_new) + tl.exp(z - m_new)
        m_vec = m_new
    m = tl.max(m_vec, axis=0)
    return m + tl.log(tl.sum(l_vec * tl.exp(m_vec - m), axis=0)), tl.sum(s_vec, axis=0)


@triton.jit
def row_loss_terms(row_ptr, w_ptr, t, ignored, n_cols, eps, z_scale, softcap, weight_sum, BLOCK: tl.constexpr,
                   ACC: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_SMOOTHING: tl.constexpr):
    """(cross-entropy term, z-loss term, lse) of one row, both terms 0 when the row is ignored:
    ce = (1−ε)·w_t·(lse − z_t) + (ε/C)·(W·lse − Σ w_j z_j),  zloss = s·lse²."""
    lse, wz_sum = row_stats(row_ptr, w_ptr, n_cols, softcap, BLOCK, ACC, HAS_SOFTCAP, HAS_WEIGHT, HAS_SMOOTHING)
    t_safe = tl.where(ignored, 0, t)
    z_t = load_logits(row_ptr, t_safe, True, softcap, HAS_SOFTCAP, ACC)
    ce = lse - z_t
    if HAS_WEIGHT:
        ce = ce * tl.load(w_ptr + t_safe).to(ACC)
    if HAS_SMOOTHING:
        ce = (1.0 - eps) * ce + (eps / n_cols) * (weight_sum * lse - wz_sum)
    return tl.where(ignored, 0.0, ce), tl.where(ignored, 0.0, z_scale * lse * lse), lse


@triton.jit
def row_backward(x_row, dx_row, w_ptr, t, ignored, lse, g, gz, eps, z_scale, softcap, weight_sum, n_cols,
                 BLOCK: tl.constexpr, ACC: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                 HAS_SMOOTHING: tl.constexpr):
    """Write one row's x̄ (dx_row may be x_row: each block is read before it is written), given g and gz, the
    gradients reaching its cross-entropy and z-loss terms. With p = softmax(z), w ≡ 1 without weights:
    z̄_j = g·w_t·(1−ε)·(p_j − 1[j=t]) + g·(ε/C)·(W·p_j − w_j) + gz·2s·lse·p_j, times 1 − tanh² under a softcap."""
    g = tl.where(ignored, 0.0, g)
    gz = tl.where(ignored, 0.0, gz)
    g_t = g
    if HAS_WEIGHT:
        g_t = g * tl.load(w_ptr + tl.where(ignored, 0, t)).to(ACC)
    cols = tl.arange(0, BLOCK)
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(ACC)
        if HAS_SOFTCAP:
            th = tanh(x / softcap)
            z = softcap * th
        else:
            z = x
        p = tl.exp(z - lse)
        dz = (g_t * (1.0 - eps)) * (p - tl.where(offs == t, 1.0, 0.0)) + (gz * 2.0 * z_scale * lse) * p
        if HAS_SMOOTHING:
            if HAS_WEIGHT:
                w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(ACC)
            else:
                w = 1.0
            dz += (g * eps / n_cols) * (weight_sum * p - w)
        if HAS_SOFTCAP:
            dz = dz * (1.0 - th * th)
        tl.store(dx_row + offs, dz.to(dx_row.dtype.element_ty), mask=mask)


@triton.jit
def load_params(P_ptr, ACC: tl.constexpr):
    """(ε, lse_square_scale, softcap, Σ_j w_j) from a 4-element tensor in ACC: float64 runs keep them in float64."""
    return tl.load(P_ptr).to(ACC), tl.load(P_ptr + 1).to(ACC), tl.load(P_ptr + 2).to(ACC), tl.load(P_ptr + 3).to(ACC)


@triton.jit
def _cross_entropy_fwd_kernel(
    X_ptr,  # (n_rows, n_cols) logits
    T_ptr,  # (n_rows,) int64 targets
    W_ptr,  # (n_cols,) class weights in ACC (unused without HAS_WEIGHT)
    LOSS_ptr,  # (n_rows,) per-row cross-entropy term, 0 where ignored
    ZLOSS_ptr,  # (n_rows,) per-row z-loss term, 0 where ignored
    LSE_ptr,  # (n_rows,) log-sum-exp of the (soft-capped) logits, saved for the backward
    x_row_stride,
    n_cols,
    ignore_index,
    P_ptr,  # (4,) in ACC: label smoothing ε, lse_square_scale, softcap, Σ_j w_j (a float argument would be float32)
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr,
):
    """loss = lse − x_t (weighted, smoothed, soft-capped) and s·lse², with an online max/sum over blocks of the row."""
    row = tl.program_id(0).to(tl.int64)
    x_row = X_ptr + row * x_row_stride
    t = tl.load(T_ptr + row)
    eps, z_scale, softcap, weight_sum = load_params(P_ptr, ACC)
    ce, zl, lse = row_loss_terms(x_row, W_ptr, t, t == ignore_index, n_cols, eps, z_scale, softcap, weight_sum,
                                 BLOCK, ACC, HAS_SOFTCAP, HAS_WEIGHT, HAS_SMOOTHING)
    tl.store(LSE_ptr + row, lse)
    tl.store(LOSS_ptr + row, ce)
    tl.store(ZLOSS_ptr + row, zl)


@triton.jit
def _cross_entropy_bwd_kernel(
    X_ptr,  # (n_rows, n_cols) logits
    T_ptr,  # (n_rows,) int64 targets
    W_ptr,  # (n_cols,) class weights in ACC (unused without HAS_WEIGHT)
    LSE_ptr,  # (n_rows,) saved log-sum-exp
    G_ptr,  # gradient reaching each row's cross-entropy term (row i at i·g_stride: stride 0 broadcasts)
    GZ_ptr,  # gradient reaching each row's z-loss term (row i at i·gz_stride)
    DX_ptr,  # (n_rows, n_cols) result
    x_row_stride,
    dx_row_stride,
    g_stride,
    gz_stride,
    n_cols,
    ignore_index,
    P_ptr,  # (4,) in ACC: ε, lse_square_scale, softcap, Σ_j w_j
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr,
):
    """x̄ = g·(softmax − onehot) and the options' terms: softmax rebuilt from one saved scalar.

    g and gz, the gradients reaching the row's two terms, come from the Function's reduction (1/Σw_t, 1/M, 1 or ḡ_i).
    """
    row = tl.program_id(0).to(tl.int64)
    t = tl.load(T_ptr + row)
    eps, z_scale, softcap, weight_sum = load_params(P_ptr, ACC)
    row_backward(X_ptr + row * x_row_stride, DX_ptr + row * dx_row_stride, W_ptr, t, t == ignore_index,
                 tl.load(LSE_ptr + row).to(ACC), tl.load(G_ptr + row * g_stride).to(ACC),
                 tl.load(GZ_ptr + row * gz_stride).to(ACC), eps, z_scale, softcap, weight_sum, n_cols,
                 BLOCK, ACC, HAS_SOFTCAP, HAS_WEIGHT, HAS_SMOOTHING)


@dataclass(frozen=True)
class LossOptions:
    """The options of the cross-entropy family, checked: what both ops' kernels take besides the logits."""

    label_smoothing: float = 0.0
    lse_square_scale: float = 0.0
    softcap: float | None = None
    weight: torch.Tensor | None = None  # (C,) in the accumulation dtype, contiguous, detached
    weight_sum: float = 0.0  # Σ_j w_j, or C without weights

    def kernel_args(self, stats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(W_ptr, P_ptr) for a kernel: the weights (``stats`` stands in for absent ones) and the four scalars
        as a tensor of ``stats``' dtype and device (Triton would pass a Python float as float32)."""
        params = torch.tensor([self.label_smoothing, self.lse_square_scale, self.softcap or 1.0, self.weight_sum],
                              dtype=stats.dtype, device=stats.device)
        return (stats if self.weight is None else self.weight), params

    def constexprs(self) -> dict:
        return {"HAS_SOFTCAP": self.softcap is not None, "HAS_WEIGHT": self.weight is not None,
                "HAS_SMOOTHING": self.label_smoothing > 0}

    def denominator(self, target: torch.Tensor, ignore_index: int) -> tuple[int, float]:
        """(valid rows, the mean's divisor of the cross-entropy part: Σ_{valid} w_t, or the valid rows)."""
        target = target.reshape(-1)
        valid = target != ignore_index
        n_valid = int(valid.sum())
        if self.weight is None:
            return n_valid, float(n_valid)
        # Gathered at every row and masked, not indexed by the mask: a shape that depends on data.
        w_t = torch.where(valid, self.weight.gather(0, torch.where(valid, target, 0)), 0.0)
        return n_valid, float(w_t.sum().item())


def _number(name: str, value, low: float, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if not (value >= low and (high is None or value <= high)) or value != value or value == float("inf"):
        span = f"[{low:g}, {high:g}]" if high is not None else f"at least {low:g} and finite"
        raise ValueError(f"{name} must be {span}, got {value!r}")
    return value


def loss_options(n_classes: int, like: torch.Tensor, *, label_smoothing=0.0, lse_square_scale=0.0, softcap=None,
                 weight=None, weight_name: str = "weight", like_name: str = "logits") -> LossOptions:
    """The options checked, with messages naming the argument; the weights copied to ``like``'s accumulation dtype."""
    eps = _number("label_smoothing", label_smoothing, 0.0, 1.0)
    z_scale = _number("lse_square_scale", lse_square_scale, 0.0)
    if softcap is not None:
        if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
            raise TypeError(f"softcap must be a positive number or None, got {type(softcap).__name__}")
        if not (0 < softcap < float("inf")):
            raise ValueError(f"softcap must be a positive number (c in c·tanh(z/c)) or None for none, got {softcap!r}")
        softcap = float(softcap)
    w, w_sum = None, float(n_classes)
    if weight is not None:
        if not isinstance(weight, torch.Tensor):
            raise TypeError(f"{weight_name} must be a torch.Tensor of per-class weights or None, got {type(weight).__name__}")
        if not weight.is_floating_point():
            raise TypeError(f"{weight_name} must be a floating tensor of per-class weights, got {weight.dtype}")
        if tuple(weight.shape) != (n_classes,):
            raise ValueError(f"{weight_name} must have shape ({n_classes},), one weight per class; got {tuple(weight.shape)}")
        if weight.device != like.device:
            raise ValueError(f"{weight_name} is on {weight.device} but {like_name} is on {like.device}; put them on one device")
        w = weight.detach().to(acc_torch_dtype(like.dtype)).contiguous()
        w_sum = float(w.sum().item())
    return LossOptions(eps, z_scale, softcap, w, w_sum)


def reduce_rows(ce: torch.Tensor, zl: torch.Tensor, reduction: str, n_valid: int, denom: float):
    """(loss, z-loss) from the per-row terms: 'none' keeps rows; 'sum' adds; 'mean' divides the cross-entropy part by
    ``denom`` and the z-loss by the valid rows. With nothing valid the mean is 0/0 = NaN, as in torch."""
    if reduction == "none":
        return ce + zl, zl
    ce_total, z_total = ce.sum(), zl.sum()
    if reduction == "sum":
        return ce_total + z_total, z_total
    z = z_total / n_valid if n_valid else z_total / 0.0
    return (ce_total / denom if denom else ce_total / 0.0) + z, z


def row_gradients(grad_loss, grad_z, reduction: str, n_valid: int, denom: float, like: torch.Tensor):
    """(g, g_z): the gradients reaching each row's cross-entropy and z-loss terms, as a (rows,) tensor for 'none' or a
    one-element tensor a kernel broadcasts (stride 0). The z-loss term is in the loss and, returned, in z-loss too."""
    zero = torch.zeros((), dtype=like.dtype, device=like.device)
    g = zero if grad_loss is None else grad_loss.to(like.dtype)
    gz = g + (zero if grad_z is None else grad_z.to(like.dtype))
    if reduction == "mean":
        # Ignored rows get no gradient whatever the scale: with none valid any finite scale will do.
        g, gz = g * (1.0 / denom if denom else 0.0), gz * (1.0 / n_valid if n_valid else 0.0)
    return g.reshape(-1).contiguous(), gz.reshape(-1).contiguous()


def _block(n_cols: int) -> int:
    """Both kernels walk the row (the vocabulary can be far longer than a block), on Triton's default 4 warps."""
    return row_launch(n_cols, loop_block=looped_block()).block


def _check_target(logits: torch.Tensor, target: torch.Tensor, ignore_index: int) -> None:
    if not isinstance(target, torch.Tensor) or target.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"target must be an integer tensor (int64) of class indices, got {getattr(target, 'dtype', type(target).__name__)}")
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"target has shape {tuple(target.shape)} but logits {tuple(logits.shape)} need "
                         f"{tuple(logits.shape[:-1])} (one class index per row)")
    n_classes = logits.shape[-1]
    valid = target != ignore_index
    if bool(((target < 0) | (target >= n_classes))[valid].any()):
        bad = target[valid & ((target < 0) | (target >= n_classes))][0].item()
        raise ValueError(f"target holds {bad}, outside [0, {n_classes}) (and not ignore_index={ignore_index})")


def cross_entropy_forward(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                          options: LossOptions | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row cross-entropy terms, z-loss terms (0 where ignored) and log-sum-exp, each shaped like ``target``."""
    check_floating("logits", logits)
    _check_target(logits, target, ignore_index)
    options = options or loss_options(logits.shape[-1], logits)
    x2 = rows_view(logits)
    t = target.reshape(-1).to(torch.int64).contiguous()
    n_rows, n_cols = x2.shape
    stats = acc_torch_dtype(logits.dtype)
    loss, zloss, lse = (torch.empty(n_rows, dtype=stats, device=logits.device) for _ in range(3))
    if n_rows:
        w_ptr, params = options.kernel_args(lse)
        _cross_entropy_fwd_kernel[(n_rows,)](x2, t, w_ptr, loss, zloss, lse, x2.stride(0), n_cols, ignore_index, params,
                                             BLOCK=_block(n_cols), ACC=acc_dtype(logits.dtype), **options.constexprs())
    return loss.view(target.shape), zloss.view(target.shape), lse.view(target.shape)


def cross_entropy_backward(logits, target, lse, row_grad, ignore_index: int = -100, z_grad=None,
                           options: LossOptions | None = None) -> torch.Tensor:
    """x̄ = row_grad · (softmax(logits) − onehot(target)) plus the options' terms, the softmax rebuilt from ``lse``.

    ``row_grad`` and ``z_grad`` (default: none) reach each row's cross-entropy and z-loss terms: shaped like
    ``target``, or one element for every row."""
    options = options or loss_options(logits.shape[-1], logits)
    x2 = rows_view(logits)
    t = target.reshape(-1).to(torch.int64).contiguous()
    n_rows, n_cols = x2.shape
    g = row_grad.reshape(-1).to(lse.dtype).contiguous()
    gz = torch.zeros(1, dtype=lse.dtype, device=lse.device) if z_grad is None else z_grad.reshape(-1).to(lse.dtype).contiguous()
    dx = torch.empty_like(x2)
    if n_rows:
        w_ptr, params = options.kernel_args(lse)
        _cross_entropy_bwd_kernel[(n_rows,)](
            x2, t, w_ptr, lse.reshape(-1).contiguous(), g, gz, dx, x2.stride(0), dx.stride(0),
            int(g.numel() > 1), int(gz.numel() > 1), n_cols, ignore_index, params,
            BLOCK=_block(n_cols), ACC=acc_dtype(logits.dtype), **options.constexprs(),
        )
    return dx.view(logits.shape)


class CrossEntropyFunction(torch.autograd.Function):
    """Saves logits, target and one lse per row; no probabilities are kept."""

    @staticmethod
    def forward(ctx, logits, target, reduction, ignore_index, options, return_z_loss):
        ctx.set_materialize_grads(False)
        ce, zl, lse = cross_entropy_forward(logits, target, ignore_index, options)
        n_valid, denom = options.denominator(target, ignore_index)
        ctx.save_for_backward(logits, target, lse)
        ctx.reduction, ctx.ignore_index, ctx.n_valid, ctx.denom, ctx.options = reduction, ignore_index, n_valid, denom, options
        loss, z_loss = reduce_rows(ce, zl, reduction, n_valid, denom)
        return (loss.to(logits.dtype), z_loss.to(logits.dtype)) if return_z_loss else loss.to(logits.dtype)

    @staticmethod
    def backward(ctx, grad_out, grad_z=None):
        logits, target, lse = ctx.saved_tensors
        g, gz = row_gradients(grad_out, grad_z, ctx.reduction, ctx.n_valid, ctx.denom, lse)
        dlogits = cross_entropy_backward(logits, target, lse, g, ctx.ignore_index, gz, ctx.options)
        return dlogits, None, None, None, None, None


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, reduction: str = "mean", ignore_index: int = -100, *,
                  weight: torch.Tensor | None = None, label_smoothing: float = 0.0, lse_square_scale: float = 0.0,
                  softcap: float | None = None, return_z_loss: bool = False):
    """Cross-entropy of softmax(logits) against class indices, fused; differentiable in ``logits``.

    Equals ``F.cross_entropy(z, target, weight, ignore_index=, reduction=, label_smoothing=)`` plus the z-loss
    (``lse_square_scale``·lse² per valid row, reduced like the loss), with z = softcap·tanh(logits/softcap)
    when ``softcap`` is given, else the logits. ``return_z_loss=True`` returns (loss, z-loss term).
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if isinstance(logits, torch.Tensor):
        (logits,) = autocast_to_float32(logits, on_cpu=True)
        n_classes = logits.shape[-1] if logits.ndim else 0
        options = loss_options(n_classes, logits, label_smoothing=label_smoothing, lse_square_scale=lse_square_scale,
                               softcap=softcap, weight=weight)
    else:
        options = None  # check_floating names the bad logits
    return CrossEntropyFunction.apply(logits, target, reduction, ignore_index, options, bool(return_z_loss))
