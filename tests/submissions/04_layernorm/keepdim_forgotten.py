# Mutant: mean and rstd returned with a size-1 axis, c1 and c2 without one, dg from the first row, partial sums overwritten.
# expect: test_layernorm_forward shape
# expect: test_layernorm_backward broadcast-axis
# expect: test_rmsnorm_backward batch-reduction
# expect: test_TritonLayerNorm batch-reduction
# expect: test_triton_layernorm batch-reduction
# %% layernorm_forward
-    return y, mean, rstd
+    return y, mean[..., None], rstd[..., None]  # bug: (..., 1), as keepdim=True leaves them, not x.shape[:-1]
# %% layernorm_backward
-    c1 = (xhat * dxhat).mean(dim=-1, keepdim=True)  # (..., 1)
-    c2 = dxhat.mean(dim=-1, keepdim=True)  # (..., 1)
+    c1 = (xhat * dxhat).mean(dim=-1)  # bug: (...,) without keepdim, broadcast along the last axis, across rows
+    c2 = dxhat.mean(dim=-1)  # bug: the same
# %% rmsnorm_backward
-    dg = (dy * xhat).reshape(-1, N).sum(dim=0)  # (N,): g was used by every row
+    dg = (dy * xhat).reshape(-1, N)[0]  # bug: the first row only: right at batch 1
# %% TritonLayerNorm layernorm_bwd_kernel
-            tl.store(DW_partial_ptr + part, tl.load(DW_partial_ptr + part, mask=mask) + dy * xhat, mask=mask)
-            tl.store(DB_partial_ptr + part, tl.load(DB_partial_ptr + part, mask=mask) + dy, mask=mask)
+            tl.store(DW_partial_ptr + part, dy * xhat, mask=mask)  # bug: stored, not added: the program's last row overwrites the others
+            tl.store(DB_partial_ptr + part, dy, mask=mask)  # bug: the same
