# Mutant: a forward difference, an absolute error, a linear stage that differentiates the sum of z (forgetting z̄), tanh's derivative for the sigmoid's.
# expect: test_numerical_gradient wrong-values
# expect: test_relative_error scale
# expect: test_linear_softmax_ce_backward wrong-values
# expect: test_sigmoid_backward wrong-values
# %% numerical_gradient
-        x_flat[i] = x_i - eps
-        f_minus = float(f(x))
-        x_flat[i] = x_i  # put it back before moving on: one entry moves at a time
-        dx_flat[i] = (f_plus - f_minus) / (2 * eps)  # the ε² terms cancel: truncation O(ε²)
+        x_flat[i] = x_i
+        dx_flat[i] = (f_plus - float(f(x))) / eps  # bug: one-sided, (f(x + ε) − f(x))/ε: error O(ε), not O(ε²)
# %% relative_error
-    return norm(a - b).item() / max(norm(a).item(), norm(b).item(), tiny)
+    return norm(a - b).item()  # bug: the absolute error, never divided by the size of the gradients
# %% linear_softmax_ce_backward
-        return ((x_ @ W_ + b_) * dz).sum()
+        return (x_ @ W_ + b_).sum()  # bug: every entry of z weighed 1, not by its z̄
# %% sigmoid_backward
-    return dy * y * (1 - y)  # the Jacobian's diagonal, σ′(x) = y(1 − y), times ȳ: 2 loads, 1 store per entry
+    return dy * (1 - y * y)  # bug: tanh's derivative in its output, not the sigmoid's
