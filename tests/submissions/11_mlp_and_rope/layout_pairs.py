# Mutant: rope_backward pairs the elements of the other layout; rope_kernel's interleaved pairs are the half-split ones and the reverse.
# expect: test_rope_backward wrong-values
# expect: test_rope_kernel wrong-values
# %% rope_backward rope_backward
-    g1, g2 = rope_pairs(dy, interleaved)
-    return rope_join(g1 * cos + g2 * sin, g2 * cos - g1 * sin, interleaved)
+    g1, g2 = rope_pairs(dy, not interleaved)  # bug: the other layout
+    return rope_join(g1 * cos + g2 * sin, g2 * cos - g1 * sin, not interleaved)
# %% rope_kernel rope_kernel
-    if INTERLEAVED:
+    if not INTERLEAVED:  # bug: the layouts exchanged
