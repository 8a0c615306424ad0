# Mutant: rope_backward turns ȳ by +θ, as the forward turns x; rope_kernel ignores BACKWARD, so its backward launch is the forward.
# expect: test_rope_backward transpose
# expect: test_rope_kernel transpose
# %% rope_backward rope_backward
-    return rope_join(g1 * cos + g2 * sin, g2 * cos - g1 * sin, interleaved)
+    return rope_join(g1 * cos - g2 * sin, g2 * cos + g1 * sin, interleaved)  # bug: R(θ) where the VJP needs R(θ)ᵀ
# %% rope_kernel rope_kernel
-    if BACKWARD:
-        sin = -sin  # the transpose of a rotation by θ is the rotation by −θ
+    # bug: BACKWARD changes nothing
