# Mutant: every reduction is a mean where the chain rule sums, and name_the_bug spells a class its own way.
# expect: test_linear_backward scale
# expect: test_linear_bias_backward scale
# expect: test_reduce_to_shape scale
# expect: test_name_the_bug shape
# expect: test_batched_matmul_backward scale
# %% linear_backward
-    dw = x_rows.mT @ dy_rows  # W̄ = xᵀ ȳ: (K, R) @ (R, N) -> (K, N); the inner axis sums over all R rows
+    dw = x_rows.mT @ dy_rows / x_rows.shape[0]  # bug: averaged over the batch
# %% linear_bias_backward
-    db = dy_rows.sum(dim=0)  # b̄: b was copied into all R rows, so their gradients add up -> (N,)
+    db = dy_rows.mean(dim=0)  # bug: averaged over the rows
# %% reduce_to_shape
-        grad = grad.sum(dim=tuple(range(lead)))
+        grad = grad.mean(dim=tuple(range(lead)))  # bug: mean over the copies
-        grad = grad.sum(dim=stretched, keepdim=True)
+        grad = grad.mean(dim=stretched, keepdim=True)  # bug: mean over the copies
# %% name_the_bug
-            return "batch-reduction" if B > 1 else "wrong-values"  # right at batch 1, wrong above: a missing sum
+            return "batch_reduction" if B > 1 else "wrong-values"  # bug: "batch_reduction" is not the grader's word
# %% batched_matmul_backward
-        dc = dc.sum(dim=tuple(range(lead)))  # c (K, N): one matrix used by every element
+        dc = dc.mean(dim=tuple(range(lead)))  # bug: a shared c receives every element's gradient in full
-        dc = dc.sum(dim=0, keepdim=True)  # c (1, K, N): the same, with its size-1 batch axis kept
+        dc = dc.mean(dim=0, keepdim=True)  # bug: the same
