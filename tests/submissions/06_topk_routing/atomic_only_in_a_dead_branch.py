# Mutant: a kernel that mentions tl.atomic_add in a branch that never runs and adds by a read-add-store (a race on a GPU).
# expect: test_scatter_add_kernel race
# %% scatter_add_kernel scatter_add_kernel
-    tl.atomic_add(OUT_ptr + dest * out_row_stride + cols, row, mask=mask)
+    if n_cols < 0:  # bug: never true, so the atomic below never runs
+        tl.atomic_add(OUT_ptr + dest * out_row_stride + cols, row, mask=mask)
+    else:  # and this load, add and store interleaves with another program's into the same row
+        out = tl.load(OUT_ptr + dest * out_row_stride + cols, mask=mask, other=0.0)
+        tl.store(OUT_ptr + dest * out_row_stride + cols, out + row, mask=mask)
