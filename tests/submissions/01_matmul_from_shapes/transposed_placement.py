# Mutant: transposes placed by habit instead of by shape, the broadcast undone on the wrong side, and name_the_bug tests with square sizes only.
# expect: test_linear_backward transpose
# expect: test_linear_bias_backward transpose
# expect: test_reduce_to_shape broadcast-axis
# expect: test_name_the_bug wrong-values
# expect: test_batched_matmul_backward transpose
# %% linear_backward
-    dw = x_rows.mT @ dy_rows  # W̄ = xᵀ ȳ: (K, R) @ (R, N) -> (K, N); the inner axis sums over all R rows
+    dw = dy_rows.mT @ x_rows  # bug: (N, K), the transpose of W̄
# %% linear_bias_backward
-    dx = dy @ w.mT  # x̄ = ȳ Wᵀ: (..., N) @ (N, K) -> (..., K)
+    dx = w @ dy_rows.mT  # bug: (K, rows), the transpose of x̄
# %% reduce_to_shape
-        grad = grad.sum(dim=tuple(range(lead)))
+        grad = grad.sum(dim=tuple(range(-lead, 0)))  # bug: broadcasting prepends axes on the left, this sums from the right
# %% name_the_bug
-    K, N = 3, 5  # every size different from every other, so a transpose or a wrong axis shows in the shape
+    K = N = 4  # bug: square w, so a transposed dw keeps its shape and goes unseen
# %% batched_matmul_backward
-    dc = a.mT @ dy  # (B, K, M) @ (B, M, N) -> (B, K, N): c̄ of each batch element, as if c were not shared
+    dc = dy.mT @ a  # bug: (..., N, K), the transpose of c̄
