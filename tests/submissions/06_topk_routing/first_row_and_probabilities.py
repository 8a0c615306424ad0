# Mutant: the embedding gradient of the first sequence only, the router's gradient stopped at p, a kernel that adds one column block.
# expect: test_embedding_backward batch-reduction
# expect: test_moe_gate_backward wrong-values
# expect: test_scatter_add_kernel wrong-values
# %% embedding_backward
-    dW.index_add_(0, ids.reshape(-1), dy.reshape(-1, D))  # read R ids and R·D gradients; add R·D
+    dW.index_add_(0, ids[0].reshape(-1), dy[0].reshape(-1, D))  # bug: ids[0] and dy[0] only: right at batch 1
# %% moe_gate_backward
-    dlogits = softmax_backward_02(p, dp)  # (..., E): every logit, chosen or not
+    dlogits = dp  # bug: p̄ returned as the logits' gradient: the softmax's own backward is skipped
# %% scatter_add_kernel scatter_add_kernel
-    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)  # (BLOCK_D,)
+    cols = tl.arange(0, BLOCK_D)  # bug: columns 0 … BLOCK_D − 1 in every program: program_id(1) is never used
