# Mutant: ε outside the square root, x̄ without its factor rstd, LayerNorm's c2 left in RMSNorm, loads without a mask.
# expect: test_layernorm_forward wrong-values
# expect: test_layernorm_backward wrong-values
# expect: test_rmsnorm_backward wrong-values
# expect: test_TritonLayerNorm out-of-bounds
# expect: test_triton_layernorm out-of-bounds
# %% layernorm_forward
-    rstd = torch.rsqrt(var + eps)  # (...,): 1/√(σ² + ε), ε inside the root
+    rstd = 1.0 / (var.sqrt() + eps)  # bug: 1/(σ + ε) instead of 1/√(σ² + ε)
# %% layernorm_backward
-    dx = (dxhat - (xhat * c1 + c2)) * rstd  # (..., N), the shape of x
+    dx = dxhat - (xhat * c1 + c2)  # bug: the last multiply by rstd is forgotten
# %% rmsnorm_backward
-    dx = (dxhat - xhat * c1) * rrms  # (..., N)
+    c2 = dxhat.mean(dim=-1, keepdim=True)  # bug: LayerNorm's formula copied over: here there is no μ for c2 to come from
+    dx = (dxhat - (xhat * c1 + c2)) * rrms
# %% TritonLayerNorm layernorm_bwd_kernel
-            x = tl.load(X_ptr + row * n_cols + cols, mask=mask, other=0.0).to(mean.dtype)  # read N over the row
-            dy = tl.load(DY_ptr + row * n_cols + cols, mask=mask, other=0.0).to(mean.dtype)  # read N
-            w = tl.load(W_ptr + cols, mask=mask, other=0.0).to(mean.dtype)  # read N: the same γ for every row
+            x = tl.load(X_ptr + row * n_cols + cols).to(mean.dtype)  # bug: no mask: the lanes past n_cols read whatever lies there
+            dy = tl.load(DY_ptr + row * n_cols + cols).to(mean.dtype)
+            w = tl.load(W_ptr + cols).to(mean.dtype)
-            x = tl.load(X_ptr + row * n_cols + cols, mask=mask, other=0.0).to(mean.dtype)  # read N again
-            dy = tl.load(DY_ptr + row * n_cols + cols, mask=mask, other=0.0).to(mean.dtype)  # read N again
-            w = tl.load(W_ptr + cols, mask=mask, other=0.0).to(mean.dtype)
+            x = tl.load(X_ptr + row * n_cols + cols).to(mean.dtype)  # bug: the same
+            dy = tl.load(DY_ptr + row * n_cols + cols).to(mean.dtype)
+            w = tl.load(W_ptr + cols).to(mean.dtype)
