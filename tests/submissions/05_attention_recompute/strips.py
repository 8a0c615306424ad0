# Mutant: the blockwise forward and backward work in strips — a block of queries against every key — not tiles.
# expect: test_attention_forward_lse saved-quadratic-tensor
# expect: test_attention_backward_recompute saved-quadratic-tensor
# %% attention_forward_lse
-BLOCK_K = 64  # keys per tile (at most 64)
+BLOCK_K = 2**20  # bug: more keys than any T: every tile is a strip, a block of queries against every key
