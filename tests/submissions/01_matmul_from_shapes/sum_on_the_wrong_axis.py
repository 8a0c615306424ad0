# Mutant: reductions over the wrong axes — dw keeps the leading axes of a 3-D x, db sums the features, keepdim lost, a (1, K, N) c not summed — and name_the_bug never looks at db.
# expect: test_linear_backward batch-reduction
# expect: test_linear_bias_backward broadcast-axis
# expect: test_reduce_to_shape shape
# expect: test_name_the_bug wrong-values
# expect: test_batched_matmul_backward batch-reduction
# %% linear_backward
-    dw = x_rows.mT @ dy_rows  # W̄ = xᵀ ȳ: (K, R) @ (R, N) -> (K, N); the inner axis sums over all R rows
+    dw = x.mT @ dy  # bug: right for a 2-D x, but a 3-D x gives one W̄ per leading index, unsummed
# %% linear_bias_backward
-    db = dy_rows.sum(dim=0)  # b̄: b was copied into all R rows, so their gradients add up -> (N,)
+    db = dy_rows.sum(dim=-1)  # bug: sums over the features instead of the rows
# %% reduce_to_shape
-        grad = grad.sum(dim=stretched, keepdim=True)
+        grad = grad.sum(dim=stretched)  # bug: keepdim=True forgotten, the size-1 axes vanish
# %% name_the_bug
-        for got, ref in zip(backward(x, w, b, dy), reference):
+        for got, ref in zip(backward(x, w, b, dy)[:2], reference[:2]):  # bug: db is never looked at
# %% batched_matmul_backward
-    if c.ndim == 3 and c.shape[0] == 1 and dc.shape[0] != 1:
-        dc = dc.sum(dim=0, keepdim=True)  # c (1, K, N): the same, with its size-1 batch axis kept
+    # bug: a (1, K, N) c is one shared matrix too, yet its gradient keeps (B, K, N)
