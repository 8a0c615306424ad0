# Mutant: every program of a group stores its share of dK and dV with tl.store; the forward loads its keys without the mask against T.
# expect: test_causal_fwd_kernel out-of-bounds
# expect: test_causal_bwd_dkdv_kernel race
# %% causal_fwd_kernel causal_fwd_kernel
-        k = tl.load(K_ptr + kv_offs, mask=kv_mask, other=0.0)
+        k = tl.load(K_ptr + kv_offs)  # bug: the lanes past T are loaded too
# %% causal_bwd_dkdv_kernel causal_bwd_dkdv_kernel
-    tl.atomic_add(DK_ptr + kv_offs, dk * sm_scale, mask=kv_mask)  # the group's G programs add into one K/V head
-    tl.atomic_add(DV_ptr + kv_offs, dv, mask=kv_mask)
+    tl.store(DK_ptr + kv_offs, dk * sm_scale, mask=kv_mask)  # bug: the group's programs overwrite each other
+    tl.store(DV_ptr + kv_offs, dv, mask=kv_mask)
