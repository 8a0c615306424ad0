# Mutant: rstd returned as σ, γ̄ and β̄ from the first row, x̂ saved for the backward, a transposed x not made contiguous.
# expect: test_layernorm_forward wrong-values
# expect: test_layernorm_backward batch-reduction
# expect: test_TritonLayerNorm wrong-values
# expect: test_triton_layernorm wrong-values
# %% layernorm_forward
def layernorm_forward(x, gamma, beta, eps=1e-5):
    """y is right, but the saved statistic is σ = √(σ² + ε), not its reciprocal."""
    mean = x.mean(dim=-1)
    std = torch.sqrt(x.var(dim=-1, correction=0) + eps)
    return (x - mean[..., None]) / std[..., None] * gamma + beta, mean, std
# %% layernorm_backward
def layernorm_backward(dy, x, gamma, mean, rstd):
    """dgamma and dbeta from row 0 alone: right at batch 1."""
    rstd = rstd[..., None]
    xhat = (x - mean[..., None]) * rstd
    wdy = gamma * dy
    c1 = (xhat * wdy).mean(dim=-1, keepdim=True)
    c2 = wdy.mean(dim=-1, keepdim=True)
    N = x.shape[-1]
    return (wdy - (xhat * c1 + c2)) * rstd, (dy * xhat).reshape(-1, N)[0], dy.reshape(-1, N)[0]
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
    """Saves x̂ (a full activation) and hands the kernel x̂ with μ = 0: right values, twice the saved memory."""

    @staticmethod
    def forward(ctx, x, gamma, beta, eps):
        y, mean, rstd = layernorm_fwd(x, gamma, beta, eps)
        xhat = (x - mean[:, None]) * rstd[:, None]
        ctx.save_for_backward(xhat, gamma, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        xhat, gamma, rstd = ctx.saved_tensors
        dy = dy.contiguous()
        n_rows, n_cols = xhat.shape
        programs = min(n_rows, MAX_PROGRAMS)
        dx = torch.empty_like(xhat)
        dw = torch.zeros(programs, n_cols, dtype=xhat.dtype, device=xhat.device)
        db = torch.zeros(programs, n_cols, dtype=xhat.dtype, device=xhat.device)
        zero_mean = torch.zeros_like(rstd)
        ones = torch.ones_like(rstd)
        layernorm_bwd_kernel[(programs,)](dy, xhat, gamma, zero_mean, ones, dx, dw, db, n_rows, n_cols,
                                          triton.cdiv(n_rows, programs), BLOCK=triton.next_power_of_2(n_cols))
        return dx * rstd[:, None], dw.sum(dim=0), db.sum(dim=0), None
# %% triton_layernorm
def triton_layernorm(x, gamma, beta, eps=1e-5):
    """Flattens without .contiguous(): a transposed x keeps rows that are not contiguous."""
    return TritonLayerNorm.apply(x.reshape(-1, x.shape[-1]), gamma, beta, eps).view(x.shape)
