# Mutant: a central difference divided by ε, a one-sided denominator, the loss summed where it is a mean, the sigmoid's derivative negated.
# expect: test_numerical_gradient scale
# expect: test_relative_error wrong-values
# expect: test_linear_softmax_ce_backward scale
# expect: test_sigmoid_backward sign
# %% numerical_gradient
-        dx_flat[i] = (f_plus - f_minus) / (2 * eps)  # the ε² terms cancel: truncation O(ε²)
+        dx_flat[i] = (f_plus - f_minus) / eps  # bug: steps 2ε but divides by ε: twice the gradient
# %% relative_error
-    return norm(a - b).item() / max(norm(a).item(), norm(b).item(), tiny)
+    return norm(a - b).item() / max(norm(b).item(), tiny)  # bug: divides by ‖b‖ only: rel(a, b) ≠ rel(b, a)
# %% linear_softmax_ce_backward
-    dz = numerical_gradient(lambda z_: torch.nn.functional.cross_entropy(z_, target), z)  # (B, C)
+    dz = numerical_gradient(lambda z_: torch.nn.functional.cross_entropy(z_, target, reduction="sum"), z)  # bug: a sum, where the loss is a mean
# %% sigmoid_backward
-    return dy * y * (1 - y)  # the Jacobian's diagonal, σ′(x) = y(1 − y), times ȳ: 2 loads, 1 store per entry
+    return dy * y * (y - 1)  # bug: 1 − y turned around
