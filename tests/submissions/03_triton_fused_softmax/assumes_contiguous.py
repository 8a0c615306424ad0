# Mutant: TritonSoftmax.backward launches on ȳ as autograd hands it over (maybe strided); triton_softmax reshapes a transposed x without making its rows contiguous.
# expect: test_TritonSoftmax wrong-values
# expect: test_triton_softmax wrong-values
# %% TritonSoftmax TritonSoftmax.backward
-        dy = dy.contiguous()  # autograd may pass a transposed or expanded ȳ
+        # bug: no dy.contiguous(), yet the kernel steps through a row one element at a time
# %% triton_softmax triton_softmax
-    rows = x.reshape(-1, N).contiguous()  # (n_rows, N), each row contiguous
+    rows = x.reshape(-1, N)  # bug: a view of a transposed x keeps its strided rows
