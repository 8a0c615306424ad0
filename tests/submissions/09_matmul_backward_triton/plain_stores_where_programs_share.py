# Mutant: the split-K kernel stores every split's partial into the first split's place; the atomic kernel stores its split's sum with tl.store.
# expect: test_linear_dw_splitk_kernel race
# expect: test_linear_dw_atomic_kernel race
# expect: test_TritonLinear race
# %% linear_dw_splitk_kernel linear_dw_splitk_kernel
-    tl.store(PW_ptr + split * K * N + ks[:, None] * N + ns[None, :], acc.to(PW_ptr.dtype.element_ty),
+    tl.store(PW_ptr + ks[:, None] * N + ns[None, :], acc.to(PW_ptr.dtype.element_ty),  # bug: every split stores into one place
# %% linear_dw_atomic_kernel linear_dw_atomic_kernel
-    tl.atomic_add(DW_ptr + ks[:, None] * stride_dwk + ns[None, :] * stride_dwn, acc,
+    tl.store(DW_ptr + ks[:, None] * stride_dwk + ns[None, :] * stride_dwn, acc,  # bug: a plain store: the splits overwrite each other
