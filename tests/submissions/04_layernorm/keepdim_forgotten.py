# Mutant: mean and rstd returned with a size-1 axis, c1 and c2 without one, dg from the first row, partial sums overwritten.
# expect: test_layernorm_forward shape
# expect: test_layernorm_backward broadcast-axis
# expect: test_rmsnorm_backward batch-reduction
# expect: test_TritonLayerNorm batch-reduction
# expect: test_triton_layernorm batch-reduction
# %% layernorm_forward
def layernorm_forward(x, gamma, beta, eps=1e-5):
    """keepdim=True everywhere: mean and rstd come back as (..., 1) instead of x.shape[:-1]."""
    mean = x.mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(((x - mean) ** 2).mean(dim=-1, keepdim=True) + eps)
    return (x - mean) * rstd * gamma + beta, mean, rstd
# %% layernorm_backward
def layernorm_backward(dy, x, gamma, mean, rstd):
    """c1 and c2 reduced without keepdim: shape (...,), broadcast along the last axis, across rows."""
    rstd = rstd[..., None]
    xhat = (x - mean[..., None]) * rstd
    wdy = gamma * dy
    c1 = (xhat * wdy).mean(dim=-1)
    c2 = wdy.mean(dim=-1)
    dx = (wdy - (xhat * c1 + c2)) * rstd
    N = x.shape[-1]
    return dx, (dy * xhat).reshape(-1, N).sum(dim=0), dy.reshape(-1, N).sum(dim=0)
# %% rmsnorm_backward
def rmsnorm_backward(dy, x, g, rrms):
    """dg from the first row only: right at batch 1."""
    rrms = rrms[..., None]
    xhat = x * rrms
    wdy = g * dy
    c1 = (xhat * wdy).mean(dim=-1, keepdim=True)
    N = x.shape[-1]
    return (wdy - xhat * c1) * rrms, (dy * xhat).reshape(-1, N)[0]
# %% TritonLayerNorm
MAX_PROGRAMS = 4


@triton.jit
def layernorm_bwd_kernel(DY_ptr, X_ptr, W_ptr, Mean_ptr, Rstd_ptr, DX_ptr, DW_partial_ptr, DB_partial_ptr,
                         n_rows, n_cols, rows_per_program, BLOCK: tl.constexpr):
    """Stores each row's ȳ ⊙ x̂ into the program's partial row: the last row overwrites the others."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(W_ptr + cols, mask=mask, other=0.0)
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
        tl.store(DW_partial_ptr + pid * n_cols + cols, g * xh, mask=mask)
        tl.store(DB_partial_ptr + pid * n_cols + cols, g, mask=mask)


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
