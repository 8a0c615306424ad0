# Mutant: eps ignored, 0/0 for two zero gradients, and dW placed transposed.
# expect: test_numerical_gradient wrong-values
# expect: test_relative_error non-finite
# expect: test_linear_softmax_ce_backward transpose
# %% numerical_gradient
-    dx = torch.zeros_like(x)  # x̄ has the shape of x
+    dx = torch.zeros_like(x)  # x̄ has the shape of x
+    eps = 1e-6  # bug: always steps 1e-6, whatever eps it is given
# %% relative_error
-    return norm(a - b).item() / max(norm(a).item(), norm(b).item(), tiny)
+    return (norm(a - b) / torch.maximum(norm(a), norm(b))).item()  # bug: no tiny: two zero gradients give 0/0 = NaN
# %% linear_softmax_ce_backward
-    dW = x.T @ dz  # (K, M) @ (M, C) -> (K, C): a sum over the batch
+    dW = dz.T @ x  # bug: (C, K) instead of (K, C), and silently (K, K) when W is square
