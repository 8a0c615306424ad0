# Mutant: dK and dV are written by the group's first query head only (the other heads' shares are dropped); the packed forward reads keys from the start of the packed row, so a query sees the documents before its own.
# expect: test_causal_bwd_dkdv_kernel batch-reduction
# expect: test_varlen_fwd_kernel wrong-values
# %% causal_bwd_dkdv_kernel causal_bwd_dkdv_kernel
-    tl.atomic_add(DK_ptr + kv_offs, dk * sm_scale, mask=kv_mask)  # the group's G programs add into one K/V head
-    tl.atomic_add(DV_ptr + kv_offs, dv, mask=kv_mask)
+    if bh % group == 0:  # bug: only the group's first head writes, and only its own share
+        tl.store(DK_ptr + kv_offs, dk * sm_scale, mask=kv_mask)
+        tl.store(DV_ptr + kv_offs, dv, mask=kv_mask)
# %% varlen_fwd_kernel varlen_fwd_kernel
-    kv_base = (h // group) * stride_h + first * stride_t
+    kv_base = (h // group) * stride_h  # bug: keys counted from the packed row's start
-    for start_n in range(0, tl.minimum(start_m + BLOCK_M, n), BLOCK_N):
+    for start_n in range(0, first + tl.minimum(start_m + BLOCK_M, n), BLOCK_N):
-        kv_mask = (keys[:, None] < n) & (cols[None, :] < head_dim)
+        kv_mask = (keys[:, None] < first + n) & (cols[None, :] < head_dim)
-        s = tl.where(keys[None, :] <= rows[:, None], s, -float("inf"))
+        s = tl.where(keys[None, :] <= first + rows[:, None], s, -float("inf"))
