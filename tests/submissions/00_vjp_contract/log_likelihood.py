# Mutant: the head's loss taken as the log-likelihood (its sign flipped), and the linear stage's scalar without z̄.
# expect: test_linear_softmax_ce_backward sign
# %% linear_softmax_ce_backward
-    dz = numerical_gradient(lambda z_: torch.nn.functional.cross_entropy(z_, target), z)  # (B, C)
+    dz = numerical_gradient(lambda z_: -torch.nn.functional.cross_entropy(z_, target), z)  # bug: log y_t, the likelihood, not the loss
