# Mutant: the backward has its sign flipped, and cross-entropy is chained through -1/y_t instead of fused; the shift's gradient is left one per entry instead of summed over the row; the log-softmax backward has its sign flipped.
# expect: test_softmax_backward sign
# expect: test_shifted_softmax_vjp shape
# expect: test_softmax_cross_entropy_backward non-finite
# expect: test_log_softmax_backward sign
# %% softmax_backward
-    return y * (dy - s)  # (..., N): x̄ = y ⊙ (ȳ − s), write N per row
+    return y * (s - dy)  # bug: the sign flipped
# %% shifted_softmax_vjp
-    dc = torch.zeros_like(c)  # c̄ = −1ᵀ J ȳ = −(J 1)ᵀ ȳ = 0: every row of J sums to zero
+    dc = -dx  # bug: c is broadcast along the row, so its gradient sums over it
# %% softmax_cross_entropy_backward
-    return (y - e_t) / M  # no log, no 1/y_t: finite however saturated the row
+    dy = -e_t / (M * y)  # bug: chained through −log(y_t)/M: 1/y_t overflows when y_t underflows
+    s = (y * dy).sum(dim=-1, keepdim=True)
+    return y * (dy - s)
# %% log_softmax_backward
-    return dz - y * g  # x̄ = z̄ − y Σ_j z̄_j: read 2N, write N per row
+    return y * g - dz  # bug: the sign flipped
