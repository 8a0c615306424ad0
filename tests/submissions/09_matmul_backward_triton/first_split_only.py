# Mutant: the atomic kernel's splits all start at row 0; TritonLinear's backward takes w̄ and b̄ from the first split's partial only.
# expect: test_linear_dw_atomic_kernel batch-reduction
# expect: test_TritonLinear batch-reduction
# %% linear_dw_atomic_kernel linear_dw_atomic_kernel
-    start = split * rows_per_split
+    start = 0  # bug: every split sums the first split's rows
# %% TritonLinear TritonLinear.backward
-        dw = pw.sum(0).to(w.dtype)  # the second pass: every element's partials summed in one fixed order
-        db = pb.sum(0).to(w.dtype)
+        dw = pw[0].to(w.dtype)  # bug: the first split's partial only
+        db = pb[0].to(w.dtype)
