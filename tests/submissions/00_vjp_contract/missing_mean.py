# Mutant: a central difference divided by ε, a one-sided denominator, and the mean's 1/M forgotten.
# expect: test_numerical_gradient scale
# expect: test_relative_error wrong-values
# expect: test_linear_softmax_ce_backward scale
# %% numerical_gradient
-        dx_flat[i] = (f_plus - f_minus) / (2 * eps)  # the ε² terms cancel: truncation O(ε²)
+        dx_flat[i] = (f_plus - f_minus) / eps  # bug: steps 2ε but divides by ε: twice the gradient
# %% relative_error
-    return norm(a - b).item() / max(norm(a).item(), norm(b).item(), tiny)
+    return norm(a - b).item() / max(norm(b).item(), tiny)  # bug: divides by ‖b‖ only: rel(a, b) ≠ rel(b, a)
# %% linear_softmax_ce_backward
-    dz = (y - E) / M  # (M, C) z̄: the collapse, times the mean's 1/M
+    dz = y - E  # bug: the loss is a mean, but this is the gradient of a sum: M times too large
