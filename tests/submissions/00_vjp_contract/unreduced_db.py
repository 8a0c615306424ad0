# Mutant: f's value read with .item() (a Python float has none), norms per row, db not summed over the batch, σ′ taken at y as if it were x.
# expect: test_numerical_gradient error
# expect: test_relative_error shape
# expect: test_linear_softmax_ce_backward batch-reduction
# expect: test_sigmoid_backward wrong-values
# %% numerical_gradient
-        f_plus = float(f(x))
+        f_plus = f(x).item()  # bug: f may return a Python float, which has no .item()
# %% relative_error
-    return norm(a - b).item() / max(norm(a).item(), norm(b).item(), tiny)
+    return norm(a - b, dim=-1) / torch.clamp(torch.maximum(norm(a, dim=-1), norm(b, dim=-1)), min=tiny)  # bug: norms along the last axis, one per row
# %% linear_softmax_ce_backward
-    db = numerical_gradient(lambda b_: pulled_back(x, W, b_), b)  # (C,)
+    db = dz  # bug: z̄ itself, (B, C): one row per example, the sum over the batch is missing
# %% sigmoid_backward
-    return dy * y * (1 - y)  # the Jacobian's diagonal, σ′(x) = y(1 − y), times ȳ: 2 loads, 1 store per entry
+    s = torch.sigmoid(y)  # bug: σ applied to the output, as if y were x
+    return dy * s * (1 - s)
