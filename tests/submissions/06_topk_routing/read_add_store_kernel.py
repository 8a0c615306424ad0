# Mutant: a kernel that reads, adds and stores (a race on a GPU, which the sanitizer sees on a CPU), and dropout's mask read backwards.
# expect: test_scatter_add_kernel race
# expect: test_dropout_backward wrong-values
# %% scatter_add_kernel scatter_add_kernel
-    tl.atomic_add(OUT_ptr + dest * out_row_stride + cols, row, mask=mask)
+    out = tl.load(OUT_ptr + dest * out_row_stride + cols, mask=mask, other=0.0)  # bug: load, add, store: programs sharing a destination can interleave
+    tl.store(OUT_ptr + dest * out_row_stride + cols, out + row, mask=mask)
# %% dropout_backward
-    return dy * mask / (1 - p)  # read ȳ and the mask (1 byte each), write x̄
+    return dy * ~mask / (1 - p)  # bug: True in the mask taken for "dropped": the gradient flows exactly where it must not
