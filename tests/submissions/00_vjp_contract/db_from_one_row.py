# Mutant: a float32 result, a crash when both gradients are zero, and db taken from the first row.
# expect: test_numerical_gradient wrong-values
# expect: test_relative_error error
# expect: test_linear_softmax_ce_backward batch-reduction
# %% numerical_gradient
-    dx = torch.zeros_like(x)  # x̄ has the shape of x
+    dx = torch.zeros(x.shape)  # bug: the default dtype, float32, not float64
# %% relative_error
-    return norm(a - b).item() / max(norm(a).item(), norm(b).item(), tiny)
+    return norm(a - b).item() / max(norm(a), norm(b), tiny).item()  # bug: both norms 0 leave the float tiny, which has no .item()
# %% linear_softmax_ce_backward
-    db = dz.sum(dim=0)  # (C,): b was copied to every row, so its gradient sums them
+    db = dz[0]  # bug: row 0 alone: right at batch 1, wrong above it
