# Mutant: J pairs entries of different rows, s is a mean instead of a sum, and the softmax skips the max shift; the shift's gradient differentiates only the numerator; the log-softmax backward treats its shift L as a constant.
# expect: test_softmax_jacobian broadcast-axis
# expect: test_softmax_backward wrong-values
# expect: test_shifted_softmax_vjp wrong-values
# expect: test_softmax_cross_entropy_backward non-finite
# expect: test_log_softmax_backward wrong-values
# %% softmax_jacobian
-    column, row = y.unsqueeze(-1), y.unsqueeze(-2)  # (..., N, 1) and (..., 1, N)
+    column, row = y.unsqueeze(0), y.unsqueeze(1)  # bug: new axes in front pair entries of different rows
# %% softmax_backward
-    s = torch.sum(y * dy, dim=-1, keepdim=True)  # (..., 1) the hub ⟨y, ȳ⟩: read 2N, keep 1 per row
+    s = torch.mean(y * dy, dim=-1, keepdim=True)  # bug: a mean instead of a sum
# %% shifted_softmax_vjp
-    dc = torch.zeros_like(c)  # c̄ = −1ᵀ J ȳ = −(J 1)ᵀ ȳ = 0: every row of J sums to zero
+    dc = -s  # bug: ∂y_i/∂c taken as −y_i, as if the denominator did not hold c
# %% softmax_cross_entropy_backward
-    y = torch.softmax(logits, dim=-1)  # (..., C): read C, write C per row
+    e = logits.exp()  # bug: no max shift: exp overflows for large logits
+    y = e / e.sum(dim=-1, keepdim=True)
# %% log_softmax_backward
-    return dz - y * g  # x̄ = z̄ − y Σ_j z̄_j: read 2N, write N per row
+    return dz  # bug: L = log Σ e^x depends on x, and its gradient is dropped
