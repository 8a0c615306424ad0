# Mutant: autograd inside both backwards, RMSNorm's x̄ without its factor rrms, y returned in the shape of the rows.
# expect: test_layernorm_backward autograd-in-backward
# expect: test_rmsnorm_backward wrong-values
# expect: test_TritonLayerNorm autograd-in-backward
# expect: test_triton_layernorm shape
# %% layernorm_backward layernorm_backward
def layernorm_backward(dy, x, gamma, mean, rstd):
    with torch.enable_grad():  # bug: autograd differentiates torch's layer_norm: no backward is written
        x_ = x.detach().requires_grad_(True)
        g_ = gamma.detach().requires_grad_(True)
        b_ = torch.zeros_like(g_, requires_grad=True)
        y = torch.nn.functional.layer_norm(x_, (x.shape[-1],), g_, b_, 1e-5)
        return torch.autograd.grad(y, (x_, g_, b_), dy)
# %% rmsnorm_backward
-    dx = (dxhat - xhat * c1) * rrms  # (..., N)
+    dx = dxhat - xhat * c1  # bug: the last multiply by rrms is forgotten
# %% TritonLayerNorm TritonLayerNorm.forward
-        ctx.save_for_backward(x, gamma, mean, rstd)  # two scalars per row, not x̂
+        ctx.save_for_backward(x, gamma, mean, rstd)  # two scalars per row, not x̂
+        ctx.eps = eps
# %% TritonLayerNorm TritonLayerNorm.backward
    @staticmethod
    def backward(ctx, dy):
        x, gamma, _, _ = ctx.saved_tensors
        with torch.enable_grad():  # bug: autograd differentiates torch's layer_norm instead of launching the kernel
            leaves = [t.detach().requires_grad_(True) for t in (x, gamma, torch.zeros_like(gamma))]
            y = torch.nn.functional.layer_norm(leaves[0], (x.shape[-1],), leaves[1], leaves[2], ctx.eps)
            dx, dgamma, dbeta = torch.autograd.grad(y, leaves, dy)
        return dx, dgamma, dbeta, None
# %% triton_layernorm
-    return TritonLayerNorm.apply(rows, gamma, beta, eps).view(x.shape)
+    return TritonLayerNorm.apply(rows, gamma, beta, eps)  # bug: y never given the shape of x
