# Mutant: right values in the wrong shape — dx left flattened, db and the leading axes kept as size-1 axes, a (1, K, N) c squeezed — and name_the_bug answers with a tuple.
# expect: test_linear_backward shape
# expect: test_linear_bias_backward shape
# expect: test_reduce_to_shape shape
# expect: test_name_the_bug shape
# expect: test_batched_matmul_backward shape
# %% linear_backward
-    dx = dy @ w.mT  # x̄ = ȳ Wᵀ: (..., N) @ (N, K) -> (..., K); the leading axes ride along
-    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)  # (R, K), (R, N): all leading axes are batch
+    x_rows, dy_rows = x.reshape(-1, K), dy.reshape(-1, N)  # (R, K), (R, N): all leading axes are batch
+    dx = dy_rows @ w.mT  # bug: (R, K), never reshaped back to the shape of x
# %% linear_bias_backward
-    db = dy_rows.sum(dim=0)  # b̄: b was copied into all R rows, so their gradients add up -> (N,)
+    db = dy_rows.sum(dim=0, keepdim=True)  # bug: (1, N), but b has shape (N,)
# %% reduce_to_shape
-        grad = grad.sum(dim=tuple(range(lead)))
-    stretched = tuple(i for i, size in enumerate(shape) if size == 1 and grad.shape[i] != 1)
+        grad = grad.sum(dim=tuple(range(lead)), keepdim=True)  # bug: the prepended axes stay, as size-1 axes
+    stretched = tuple(lead + i for i, size in enumerate(shape) if size == 1 and grad.shape[lead + i] != 1)
# %% name_the_bug
-        for got, ref in zip(backward(x, w, b, dy), reference):
+        return tuple("none" if got.shape == ref.shape and close(got, ref) else "wrong"  # bug: a tuple, one label per output
+                     for got, ref in zip(backward(x, w, b, dy), reference))
+        for got, ref in zip(backward(x, w, b, dy), reference):
# %% batched_matmul_backward
-        dc = dc.sum(dim=0, keepdim=True)  # c (1, K, N): the same, with its size-1 batch axis kept
+        dc = dc.sum(dim=0)  # bug: a (1, K, N) c comes back (K, N)
