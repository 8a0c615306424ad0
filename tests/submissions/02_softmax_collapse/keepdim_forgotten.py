# Mutant: row reductions lose their last axis (keepdim forgotten), and the Jacobian has its sign flipped; the shift's row max loses its axis too; the log-softmax backward's row sum loses its axis too.
# expect: test_softmax_jacobian sign
# expect: test_softmax_backward broadcast-axis
# expect: test_shifted_softmax_vjp broadcast-axis
# expect: test_softmax_cross_entropy_backward broadcast-axis
# expect: test_log_softmax_backward broadcast-axis
# %% softmax_jacobian
-    return torch.diag_embed(y) - column * row  # diag(y) − y yᵀ: write N² per row
+    return column * row - torch.diag_embed(y)  # bug: y yᵀ − diag(y), the sign flipped
# %% softmax_backward
-    s = torch.sum(y * dy, dim=-1, keepdim=True)  # (..., 1) the hub ⟨y, ȳ⟩: read 2N, keep 1 per row
+    s = torch.sum(y * dy, dim=-1)  # bug: shape (...,) broadcasts along the wrong axis
# %% shifted_softmax_vjp
-    m = x.amax(dim=-1, keepdim=True)  # (..., 1), one per row
+    m = x.amax(dim=-1)  # bug: the row max of shape (...,) shifts along the wrong axis
# %% softmax_cross_entropy_backward
-    y = torch.softmax(logits, dim=-1)  # (..., C): read C, write C per row
+    e = (logits - logits.amax(dim=-1, keepdim=True)).exp()
+    y = e / e.sum(dim=-1)  # bug: the normaliser lost its last axis
# %% log_softmax_backward
-    g = dz.sum(dim=-1, keepdim=True)  # (..., 1): Σ_j z̄_j, all that reaches the shift lse, one per row
+    g = dz.sum(dim=-1)  # bug: shape (...,) broadcasts along the wrong axis
