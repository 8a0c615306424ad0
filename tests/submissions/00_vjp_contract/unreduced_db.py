# Mutant: the caller's x nudged in place and never put back, norms per row, db not summed over the batch.
# expect: test_numerical_gradient wrong-values
# expect: test_relative_error shape
# expect: test_linear_softmax_ce_backward batch-reduction
# %% numerical_gradient
-    x = x.detach().to(torch.float64).clone(memory_format=torch.contiguous_format)
-    dx = torch.zeros_like(x)  # x̄ has the shape of x
+    dx = torch.zeros(x.shape, dtype=torch.float64)  # bug: no copy: the loop nudges the caller's x
-        x_flat[i] = x_i  # put it back before moving on: one entry moves at a time
+        # bug: x_i is never put back
# %% relative_error
-    return norm(a - b).item() / max(norm(a).item(), norm(b).item(), tiny)
+    return norm(a - b, dim=-1) / torch.clamp(torch.maximum(norm(a, dim=-1), norm(b, dim=-1)), min=tiny)  # bug: norms along the last axis, one per row
# %% linear_softmax_ce_backward
-    db = dz.sum(dim=0)  # (C,): b was copied to every row, so its gradient sums them
+    db = dz  # bug: (M, C), one row per example: the sum over the batch is missing
