# Mutant: the forward kernel loads the whole block without a mask, so it reads past the end of each row.
# expect: test_softmax_fwd_kernel out-of-bounds
# expect: test_TritonSoftmax out-of-bounds
# expect: test_triton_softmax out-of-bounds
# %% softmax_fwd_kernel softmax_fwd_kernel
-    x = tl.load(X_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf"))  # read N
+    x = tl.load(X_ptr + row * x_row_stride + cols)  # bug: no mask, so lanes ≥ n_cols read whatever follows
