# Mutant: a forward difference, an absolute error, and softmax − onehot turned around.
# expect: test_numerical_gradient wrong-values
# expect: test_relative_error scale
# expect: test_linear_softmax_ce_backward sign
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
-    dz = (y - E) / M  # (M, C) z̄: the collapse, times the mean's 1/M
+    dz = (E - y) / M  # bug: onehot − softmax: every gradient negated
