# Mutant: ε outside the square root, x̄ without its factor rstd, LayerNorm's c2 left in RMSNorm, loads without a mask.
# expect: test_layernorm_forward wrong-values
# expect: test_layernorm_backward wrong-values
# expect: test_rmsnorm_backward wrong-values
# expect: test_TritonLayerNorm wrong-values
# expect: test_triton_layernorm wrong-values
# %% layernorm_forward
def layernorm_forward(x, gamma, beta, eps=1e-5):
    """1/(σ + ε) instead of 1/√(σ² + ε)."""
    mean = x.mean(dim=-1)
    sigma = x.std(dim=-1, correction=0)
    rstd = 1.0 / (sigma + eps)
    return (x - mean[..., None]) * rstd[..., None] * gamma + beta, mean, rstd
# %% layernorm_backward
def layernorm_backward(dy, x, gamma, mean, rstd):
    """The last multiply by rstd is forgotten."""
    xhat = (x - mean[..., None]) * rstd[..., None]
    wdy = gamma * dy
    c1 = (xhat * wdy).mean(dim=-1, keepdim=True)
    c2 = wdy.mean(dim=-1, keepdim=True)
    N = x.shape[-1]
    return wdy - (xhat * c1 + c2), (dy * xhat).reshape(-1, N).sum(dim=0), dy.reshape(-1, N).sum(dim=0)
# %% rmsnorm_backward
def rmsnorm_backward(dy, x, g, rrms):
    """LayerNorm's formula copied over: the c2 = mean(ŵȳ) term has no μ to come from here."""
    rrms = rrms[..., None]
    xhat = x * rrms
    wdy = g * dy
    c1 = (xhat * wdy).mean(dim=-1, keepdim=True)
    c2 = wdy.mean(dim=-1, keepdim=True)
    return (wdy - (xhat * c1 + c2)) * rrms, (dy * xhat).reshape(-1, x.shape[-1]).sum(dim=0)
# %% TritonLayerNorm
MAX_PROGRAMS = 4


@triton.jit
def layernorm_bwd_kernel(DY_ptr, X_ptr, W_ptr, Mean_ptr, Rstd_ptr, DX_ptr, DW_partial_ptr, DB_partial_ptr,
                         n_rows, n_cols, rows_per_program, BLOCK: tl.constexpr):
    """Loads whole blocks without a mask: the lanes past n_cols read whatever lies there."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(W_ptr + cols)
    acc_w = tl.zeros([BLOCK], dtype=w.dtype)
    acc_b = tl.zeros([BLOCK], dtype=w.dtype)
    start = pid * rows_per_program
    for r in range(start, tl.minimum(start + rows_per_program, n_rows)):
        x = tl.load(X_ptr + r * n_cols + cols)
        g = tl.load(DY_ptr + r * n_cols + cols)
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
    """Right, apart from its kernel."""

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
        return dx, dw.sum(dim=0), db.sum(dim=0), None
