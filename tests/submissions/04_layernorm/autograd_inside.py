# Mutant: autograd inside both backwards, RMSNorm's x̄ without its factor rrms, y returned in the shape of the rows.
# expect: test_layernorm_backward autograd-in-backward
# expect: test_rmsnorm_backward wrong-values
# expect: test_TritonLayerNorm autograd-in-backward
# expect: test_triton_layernorm shape
# %% layernorm_backward
def layernorm_backward(dy, x, gamma, mean, rstd):
    """Lets autograd do the work."""
    with torch.enable_grad():
        x_ = x.detach().requires_grad_(True)
        g_ = gamma.detach().requires_grad_(True)
        b_ = torch.zeros_like(g_, requires_grad=True)
        y = torch.nn.functional.layer_norm(x_, (x.shape[-1],), g_, b_, 1e-5)
        return torch.autograd.grad(y, (x_, g_, b_), dy)
# %% rmsnorm_backward
def rmsnorm_backward(dy, x, g, rrms):
    """The last multiply by rrms is forgotten."""
    xhat = x * rrms[..., None]
    wdy = g * dy
    c1 = (xhat * wdy).mean(dim=-1, keepdim=True)
    return wdy - xhat * c1, (dy * xhat).reshape(-1, x.shape[-1]).sum(dim=0)
# %% TritonLayerNorm
MAX_PROGRAMS = 4


@triton.jit
def layernorm_bwd_kernel(DY_ptr, X_ptr, W_ptr, Mean_ptr, Rstd_ptr, DX_ptr, DW_partial_ptr, DB_partial_ptr,
                         n_rows, n_cols, rows_per_program, BLOCK: tl.constexpr):
    """A correct kernel, which the backward below never launches."""
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
    """The backward differentiates torch's own layer_norm with autograd instead of launching the kernel."""

    @staticmethod
    def forward(ctx, x, gamma, beta, eps):
        y, mean, rstd = layernorm_fwd(x, gamma, beta, eps)
        ctx.save_for_backward(x, gamma, beta)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, gamma, beta = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(True) for t in (x, gamma, beta)]
            y = torch.nn.functional.layer_norm(leaves[0], (x.shape[-1],), leaves[1], leaves[2], ctx.eps)
            dx, dgamma, dbeta = torch.autograd.grad(y, leaves, dy)
        return dx, dgamma, dbeta, None
# %% triton_layernorm
def triton_layernorm(x, gamma, beta, eps=1e-5):
    """Forgets to give y the shape of x."""
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    return TritonLayerNorm.apply(rows, gamma, beta, eps)
