# Mutant: TritonSoftmax.backward launches on ȳ as autograd hands it over (maybe strided); triton_softmax reshapes a transposed x without making its rows contiguous; the forward kernel rounds its exponentials back to the row's dtype before summing ℓ.
# expect: test_TritonSoftmax wrong-values
# expect: test_triton_softmax race
# expect: test_softmax_fwd_kernel half-accumulation
# %% TritonSoftmax TritonSoftmax.backward
-        dy = dy.contiguous()  # autograd may pass a transposed or expanded ȳ
+        # bug: no dy.contiguous(), yet the kernel steps through a row one element at a time
# %% triton_softmax triton_softmax
-    rows = x.reshape(-1, N).contiguous()  # (n_rows, N), each row contiguous
+    rows = x.reshape(-1, N)  # bug: a view of a transposed x keeps its strided rows
# %% softmax_fwd_kernel softmax_fwd_kernel
-    x = x.to(tl.float32) if x.dtype.primitive_bitwidth < 32 else x
-    m = tl.max(x, axis=0)
-    e = tl.exp(x - m)  # every exponent ≤ 0: no overflow
+    m = tl.max(x, axis=0)
+    e = tl.exp(x - m).to(X_ptr.dtype.element_ty)  # bug: e, ℓ and y in the row's dtype, float16 on float16 rows
