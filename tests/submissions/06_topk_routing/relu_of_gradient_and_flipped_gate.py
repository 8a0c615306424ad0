# Mutant: every row of top-k flattened into one, ReLU applied to the gradient, and the gate's sign flipped in both gradients.
# expect: test_topk_backward shape
# expect: test_relu_backward wrong-values
# expect: test_moe_gate_backward sign
# %% topk_backward
-    dx = dy.new_zeros(*dy.shape[:-1], n)  # (..., n): zero at every slot nobody chose; write n
+    dx = dy.new_zeros(n)  # bug: one vector of n for all the rows: the leading axes are lost
-    dx.scatter_add_(-1, indices, dy)  # read k gradients and k indices per row
+    dx.scatter_add_(0, indices.reshape(-1), dy.reshape(-1))
# %% relu_backward
-    return dy * (x > 0)  # read ȳ and x (or a 1-bit mask), write x̄: a select, no FLOPs
+    return torch.relu(dy)  # bug: ReLU of ȳ: the gradient's own sign decides, not the input's
# %% moe_gate_backward
-    dexpert_out = g[..., :, None] * dy[..., None, :]  # (..., k, D): h̄_m = g_m ȳ
+    dexpert_out = -g[..., :, None] * dy[..., None, :]  # bug: the gate's sign flipped
-    dg = (expert_out * dy[..., None, :]).sum(dim=-1)  # (..., k): ḡ_m = ⟨ȳ, h_m⟩
+    dg = -(expert_out * dy[..., None, :]).sum(dim=-1)  # bug: the gates' gradient negated too
