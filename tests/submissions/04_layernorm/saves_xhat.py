# Mutant: rstd returned as σ, γ̄ and β̄ from the first row, x̂ saved for the backward, a transposed x not made contiguous.
# expect: test_layernorm_forward wrong-values
# expect: test_layernorm_backward batch-reduction
# expect: test_TritonLayerNorm wrong-values
# expect: test_triton_layernorm wrong-values
# %% layernorm_forward
-    return y, mean, rstd
+    return y, mean, 1 / rstd  # bug: y is right, but the statistic returned is σ = √(σ² + ε), not its reciprocal
# %% layernorm_backward
-    dgamma = (dy * xhat).reshape(-1, N).sum(dim=0)  # (N,): γ was used by every row
-    dbeta = dy.reshape(-1, N).sum(dim=0)  # (N,)
+    dgamma = (dy * xhat).reshape(-1, N)[0]  # bug: row 0 alone: right at batch 1
+    dbeta = dy.reshape(-1, N)[0]  # bug: the same
# %% TritonLayerNorm TritonLayerNorm
-        ctx.save_for_backward(x, gamma, mean, rstd)  # two scalars per row, not x̂
+        ctx.save_for_backward((x - mean[:, None]) * rstd[:, None], gamma, rstd)  # bug: x̂, a full activation: twice the memory
-        x, gamma, mean, rstd = ctx.saved_tensors
+        x, gamma, rstd = ctx.saved_tensors  # x̂, handed to the kernel with μ = 0 and rstd = 1
+        mean, ones = torch.zeros_like(rstd), torch.ones_like(rstd)
-            dy, x, gamma, mean, rstd, dx, dgamma_partial, dbeta_partial,
+            dy, x, gamma, mean, ones, dx, dgamma_partial, dbeta_partial,
-        return dx, dgamma, dbeta, None
+        return dx * rstd[:, None], dgamma, dbeta, None
# %% triton_layernorm
-    rows = x.reshape(-1, N).contiguous()  # (n_rows, N), each row contiguous
+    rows = x.reshape(-1, N)  # bug: no .contiguous(): a transposed x keeps rows that are not contiguous
