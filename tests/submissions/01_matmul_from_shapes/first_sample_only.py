# Mutant: the batch axis is never summed — one sample stands in for all of them; name_the_bug never looks above batch 1; the handed-over batched matmul left unrepaired.
# expect: test_linear_backward batch-reduction
# expect: test_linear_bias_backward batch-reduction
# expect: test_reduce_to_shape batch-reduction
# expect: test_name_the_bug wrong-values
# expect: test_batched_matmul_backward batch-reduction
# %% linear_backward
-    dw = x_rows.mT @ dy_rows  # W̄ = xᵀ ȳ: (K, R) @ (R, N) -> (K, N); the inner axis sums over all R rows
+    dw = torch.outer(x_rows[0], dy_rows[0])  # bug: the first sample only
# %% linear_bias_backward
-    db = dy_rows.sum(dim=0)  # b̄: b was copied into all R rows, so their gradients add up -> (N,)
+    db = dy_rows[0]  # bug: the first row only
# %% reduce_to_shape
-    if lead > 0:  # guarded, because grad.sum(dim=()) would sum over everything
-        grad = grad.sum(dim=tuple(range(lead)))
-    stretched = tuple(i for i, size in enumerate(shape) if size == 1 and grad.shape[i] != 1)
+    # bug: only the stretched size-1 axes are summed; the prepended leading axes stay
+    stretched = tuple(lead + i for i, size in enumerate(shape) if size == 1 and grad.shape[lead + i] != 1)
# %% name_the_bug
-    for B in (1, 7):  # batch 1 first: a batch-reduction is right there
+    for B in (1,):  # bug: no run above batch 1, so every batch-reduction bug comes back "none"
# %% batched_matmul_backward
-    dc = a.mT @ dy  # (B, K, M) @ (B, M, N) -> (B, K, N): c̄ of each batch element, as if c were not shared
+    dc = (a.mT @ dy).sum(dim=0).expand(c.shape)  # bug: the handed-over function, unrepaired: summed even when c is per element
