# Mutant: eps ignored, 0/0 for two zero gradients, W̄ taken with respect to Wᵀ, the sigmoid's diagonal without ȳ.
# expect: test_numerical_gradient wrong-values
# expect: test_relative_error non-finite
# expect: test_linear_softmax_ce_backward transpose
# expect: test_sigmoid_backward wrong-values
# %% numerical_gradient
-    dx = torch.zeros_like(x)  # x̄ has the shape of x
+    dx = torch.zeros_like(x)  # x̄ has the shape of x
+    eps = 1e-6  # bug: always steps 1e-6, whatever eps it is given
# %% relative_error
-    return norm(a - b).item() / max(norm(a).item(), norm(b).item(), tiny)
+    return (norm(a - b) / torch.maximum(norm(a), norm(b))).item()  # bug: no tiny: two zero gradients give 0/0 = NaN
# %% linear_softmax_ce_backward
-    dW = numerical_gradient(lambda W_: pulled_back(x, W_, b), W)  # (K, C)
+    dW = numerical_gradient(lambda Wt: pulled_back(x, Wt.T, b), W.T)  # bug: the gradient of Wᵀ, (C, K), silently (K, K) when W is square
# %% sigmoid_backward
-    return dy * y * (1 - y)  # the Jacobian's diagonal, σ′(x) = y(1 − y), times ȳ: 2 loads, 1 store per entry
+    return y * (1 - y)  # bug: the Jacobian's diagonal alone, ȳ never applied
