# Mutant: the backward builds the full N×N Jacobian (right values), and the loss gradient is summed over the rows; the shifted softmax exponentiates x − c as handed in; the log-softmax backward builds its N×N Jacobian too.
# expect: test_softmax_backward materialized-jacobian
# expect: test_shifted_softmax_vjp non-finite
# expect: test_softmax_cross_entropy_backward scale
# expect: test_log_softmax_backward materialized-jacobian
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
# %% log_softmax_backward
-    return dz - y * g  # x̄ = z̄ − y Σ_j z̄_j: read 2N, write N per row
+    J = torch.eye(z.shape[-1], dtype=z.dtype) - y[..., None, :]  # bug: the full (..., N, N) Jacobian, ∂z_i/∂x_j
+    return (J.mT @ dz[..., :, None])[..., 0]
