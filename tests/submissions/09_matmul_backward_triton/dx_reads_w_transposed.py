# Mutant: the dx kernel reads its tile of w with the two strides swapped: x̄ = ȳw, which runs only for a square w.
# expect: test_linear_dx_kernel transpose
# expect: test_TritonLinear transpose
# %% linear_dx_kernel linear_dx_kernel
-        wt = tl.load(W_ptr + cols[None, :] * stride_wk + ns[:, None] * stride_wn,
+        wt = tl.load(W_ptr + cols[None, :] * stride_wn + ns[:, None] * stride_wk,  # bug: w's strides swapped
