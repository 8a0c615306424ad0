# Mutant: torch.var's unbiased default, γ̄ and β̄ left per row, RMSNorm's x̄ negated, and the second pass forgotten.
# expect: test_layernorm_forward wrong-values
# expect: test_layernorm_backward batch-reduction
# expect: test_rmsnorm_backward sign
# expect: test_TritonLayerNorm batch-reduction
# %% layernorm_forward
-    var = (xc * xc).mean(dim=-1)  # (...,): σ², biased — divide by N
+    var = torch.var(x, dim=-1)  # bug: torch.var divides by N − 1 unless told otherwise
# %% layernorm_backward
-    dgamma = (dy * xhat).reshape(-1, N).sum(dim=0)  # (N,): γ was used by every row
-    dbeta = dy.reshape(-1, N).sum(dim=0)  # (N,)
+    dgamma = dy * xhat  # bug: one row per example: the sum over the batch is missing
+    dbeta = dy  # bug: the same
# %% rmsnorm_backward
-    dx = (dxhat - xhat * c1) * rrms  # (..., N)
+    dx = (xhat * c1 - dxhat) * rrms  # bug: x̂·c1 − ŵȳ: every entry of dx negated
# %% TritonLayerNorm TritonLayerNorm
-        dgamma = dgamma_partial.sum(dim=0).to(gamma.dtype)  # (N,): read n_programs·N, write N; rounded once
-        dbeta = dbeta_partial.sum(dim=0).to(gamma.dtype)  # (N,)
+        dgamma, dbeta = dgamma_partial, dbeta_partial  # bug: the second pass forgotten: (n_programs, N), not (N,)
