# Mutant: the descent step's minus sign slips into the gradients, sum(dim=()) sums everything, and name_the_bug blames a missing sum before it looks for a factor.
# expect: test_linear_backward sign
# expect: test_linear_bias_backward sign
# expect: test_reduce_to_shape shape
# expect: test_name_the_bug wrong-values
# expect: test_batched_matmul_backward sign
# %% linear_backward
-    dx = dy @ w.mT  # x̄ = ȳ Wᵀ: (..., N) @ (N, K) -> (..., K); the leading axes ride along
+    dx = -(dy @ w.mT)  # bug: the update direction is not the gradient
# %% linear_bias_backward
-    dw = x.reshape(-1, K).mT @ dy_rows  # W̄ = xᵀ ȳ summed over all R rows: (K, R) @ (R, N) -> (K, N)
+    dw = -(x.reshape(-1, K).mT @ dy_rows)  # bug: the update direction is not the gradient
# %% reduce_to_shape
-    if lead > 0:  # guarded, because grad.sum(dim=()) would sum over everything
-        grad = grad.sum(dim=tuple(range(lead)))
+    grad = grad.sum(dim=tuple(range(lead)))  # bug: with lead == 0 this is sum(dim=()), which sums every axis
# %% name_the_bug
-                return "sign"
+                return "sign"
+            if B > 1:  # bug: asked before "a constant factor?", so a mean becomes a batch-reduction
+                return "batch-reduction"
# %% batched_matmul_backward
-    dc = a.mT @ dy  # (B, K, M) @ (B, M, N) -> (B, K, N): c̄ of each batch element, as if c were not shared
+    dc = -(a.mT @ dy)  # bug: the update direction is not the gradient
