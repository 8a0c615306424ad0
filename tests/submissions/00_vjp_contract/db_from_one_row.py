# Mutant: float32 kept when x arrives in it, a crash when both gradients are zero, db taken from the first row, exp's derivative for the sigmoid's.
# expect: test_numerical_gradient wrong-values
# expect: test_relative_error error
# expect: test_linear_softmax_ce_backward batch-reduction
# expect: test_sigmoid_backward wrong-values
# %% numerical_gradient
-    x = x.detach().to(torch.float64).clone(memory_format=torch.contiguous_format)
+    x = x.detach().clone(memory_format=torch.contiguous_format)  # bug: x's own dtype, float32 when it comes in float32
# %% relative_error
-    return norm(a - b).item() / max(norm(a).item(), norm(b).item(), tiny)
+    return norm(a - b).item() / max(norm(a), norm(b), tiny).item()  # bug: both norms 0 leave the float tiny, which has no .item()
# %% linear_softmax_ce_backward
-    db = numerical_gradient(lambda b_: pulled_back(x, W, b_), b)  # (C,)
+    db = numerical_gradient(lambda b_: ((x[:1] @ W + b_) * dz[:1]).sum(), b)  # bug: row 0 alone: right at batch 1 only
# %% sigmoid_backward
-    return dy * y * (1 - y)  # the Jacobian's diagonal, σ′(x) = y(1 − y), times ȳ: 2 loads, 1 store per entry
+    return dy * y  # bug: exp's derivative written in its output; the sigmoid's is not itself
