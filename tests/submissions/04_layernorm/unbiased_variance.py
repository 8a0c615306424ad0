# Mutant: torch.var's unbiased default, γ̄ and β̄ left per row, RMSNorm's x̄ negated, and the second pass forgotten.
# expect: test_layernorm_forward wrong-values
# expect: test_layernorm_backward batch-reduction
# expect: test_rmsnorm_backward sign
# expect: test_TritonLayerNorm batch-reduction
# %% layernorm_forward
def layernorm_forward(x, gamma, beta, eps=1e-5):
    """σ² from torch.var, which divides by N − 1 unless told otherwise."""
    mean = x.mean(dim=-1)
    rstd = 1.0 / torch.sqrt(torch.var(x, dim=-1) + eps)
    y = (x - mean[..., None]) * rstd[..., None] * gamma + beta
    return y, mean, rstd
# %% layernorm_backward
def layernorm_backward(dy, x, gamma, mean, rstd):
    """dgamma and dbeta keep one row per example: the sum over the batch is missing."""
    rstd = rstd[..., None]
    xhat = (x - mean[..., None]) * rstd
    wdy = gamma * dy
    c1 = (xhat * wdy).mean(dim=-1, keepdim=True)
    c2 = wdy.mean(dim=-1, keepdim=True)
    dx = (wdy - (xhat * c1 + c2)) * rstd
    return dx, dy * xhat, dy
# %% rmsnorm_backward
def rmsnorm_backward(dy, x, g, rrms):
    """x̂·c1 − ŵȳ instead of ŵȳ − x̂·c1: every entry of dx negated."""
    rrms = rrms[..., None]
    xhat = x * rrms
    wdy = g * dy
    c1 = (xhat * wdy).mean(dim=-1, keepdim=True)
    return (xhat * c1 - wdy) * rrms, (dy * xhat).reshape(-1, x.shape[-1]).sum(dim=0)
# %% TritonLayerNorm
MAX_PROGRAMS = 4


@triton.jit
def layernorm_bwd_kernel(DY_ptr, X_ptr, W_ptr, Mean_ptr, Rstd_ptr, DX_ptr, DW_partial_ptr, DB_partial_ptr,
                         n_rows, n_cols, rows_per_program, BLOCK: tl.constexpr):
    """A correct kernel."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(W_ptr + cols, mask=mask, other=0.0)
    acc_w = tl.zeros([BLOCK], dtype=w.dtype)
    acc_b = tl.zeros([BLOCK], dtype=w.dtype)
    start = pid * rows_per_program
    for r in range(start, tl.minimum(start + rows_per_program, n_rows)):
        x = tl.load(X_ptr + r * n_cols + cols, mask=mask, other=0.0)
        g = tl.load(DY_ptr + r * n_cols + cols, mask=mask, other=0.0)
        s = tl.load(Rstd_ptr + r)
        xh = (x - tl.load(Mean_ptr + r)) * s
        wg = w * g
        a = tl.sum(xh * wg, axis=0) / n_cols
        b = tl.sum(wg, axis=0) / n_cols
        tl.store(DX_ptr + r * n_cols + cols, (wg - (xh * a + b)) * s, mask=mask)
        acc_w += g * xh
        acc_b += g
    tl.store(DW_partial_ptr + pid * n_cols + cols, acc_w, mask=mask)
    tl.store(DB_partial_ptr + pid * n_cols + cols, acc_b, mask=mask)


class TritonLayerNorm(torch.autograd.Function):
    """Returns the (n_programs, N) partial buffers as γ̄ and β̄: autograd would sum them silently."""

    @staticmethod
    def forward(ctx, x, gamma, beta, eps):
        y, mean, rstd = layernorm_fwd(x, gamma, beta, eps)
        ctx.save_for_backward(x, gamma, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, gamma, mean, rstd = ctx.saved_tensors
        dy = dy.contiguous()
        n_rows, n_cols = x.shape
        programs = min(n_rows, MAX_PROGRAMS)
        dx = torch.empty_like(x)
        dw = torch.zeros(programs, n_cols, dtype=x.dtype, device=x.device)
        db = torch.zeros(programs, n_cols, dtype=x.dtype, device=x.device)
        layernorm_bwd_kernel[(programs,)](dy, x, gamma, mean, rstd, dx, dw, db, n_rows, n_cols,
                                          triton.cdiv(n_rows, programs), BLOCK=triton.next_power_of_2(n_cols))
        return dx, dw, db, None
