# Mutant: the backward builds the full N×N Jacobian (right values), and the loss gradient is summed over the rows; the shifted softmax exponentiates x − c as handed in.
# expect: test_softmax_backward materialized-jacobian
# expect: test_shifted_softmax_vjp non-finite
# expect: test_softmax_cross_entropy_backward scale
# %% softmax_backward
-    s = torch.sum(y * dy, dim=-1, keepdim=True)  # (..., 1) the hub ⟨y, ȳ⟩: read 2N, keep 1 per row
-    return y * (dy - s)  # (..., N): x̄ = y ⊙ (ȳ − s), write N per row
+    J = torch.diag_embed(y) - y[..., :, None] * y[..., None, :]  # bug: the full (..., N, N) Jacobian, right values
+    return (J @ dy[..., :, None])[..., 0]
# %% shifted_softmax_vjp
-    m = x.amax(dim=-1, keepdim=True)  # (..., 1), one per row
+    m = c  # bug: c as handed in: c = 0, or c far from the row, leaves exponents of ±1000
# %% softmax_cross_entropy_backward
-    return (y - e_t) / M  # no log, no 1/y_t: finite however saturated the row
+    return y - e_t  # bug: the 1/M of the mean forgotten
