# Mutant: the hub is summed over the whole batch, every row gets -1 at every target, and J loses its diagonal; the shifted softmax subtracts one max for the whole batch; the log-softmax backward sums z̄ over the whole batch.
# expect: test_softmax_jacobian wrong-values
# expect: test_softmax_backward broadcast-axis
# expect: test_shifted_softmax_vjp non-finite
# expect: test_softmax_cross_entropy_backward batch-reduction
# expect: test_log_softmax_backward broadcast-axis
# %% softmax_jacobian
-    return torch.diag_embed(y) - column * row  # diag(y) − y yᵀ: write N² per row
+    return -(column * row)  # bug: diag(y) forgotten
# %% softmax_backward
-    s = torch.sum(y * dy, dim=-1, keepdim=True)  # (..., 1) the hub ⟨y, ȳ⟩: read 2N, keep 1 per row
+    s = torch.sum(y * dy)  # bug: one number for the whole batch
# %% shifted_softmax_vjp
-    m = x.amax(dim=-1, keepdim=True)  # (..., 1), one per row
+    m = x.max()  # bug: one shift for the whole batch underflows rows far below the largest
# %% softmax_cross_entropy_backward
-    e_t = torch.nn.functional.one_hot(target, num_classes=C).to(y.dtype)  # (..., C), 1 at the target
+    e_t = torch.zeros_like(y)
+    e_t[:, target] = 1  # bug: every row gets a 1 at every row's target
# %% log_softmax_backward
-    g = dz.sum(dim=-1, keepdim=True)  # (..., 1): Σ_j z̄_j, all that reaches the shift lse, one per row
+    g = dz.sum()  # bug: one total for the whole batch
