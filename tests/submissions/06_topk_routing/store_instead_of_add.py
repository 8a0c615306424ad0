# Mutant: every scatter stores where it must add — right until two contributions land on one slot.
# expect: test_topk_backward non-atomic-scatter
# expect: test_embedding_backward non-atomic-scatter
# expect: test_maxpool1d_backward non-atomic-scatter
# expect: test_scatter_add_kernel race
# %% topk_backward
-    dx.scatter_add_(-1, indices, dy)  # read k gradients and k indices per row
+    dx.scatter_(-1, indices, dy)  # bug: scatter_ stores: a repeated index keeps one ȳ
# %% embedding_backward
-    dW.index_add_(0, ids.reshape(-1), dy.reshape(-1, D))  # read R ids and R·D gradients; add R·D
+    dW[ids] = dy  # bug: stored: a token read twice keeps the gradient of its last occurrence
# %% maxpool1d_backward
-    dx.scatter_add_(-1, a, dy)  # add, not store: overlapping windows can share their max
+    dx.scatter_(-1, a, dy)  # bug: right positions, but stored: a max shared by overlapping windows gets one window's gradient
# %% scatter_add_kernel scatter_add_kernel
-    tl.atomic_add(OUT_ptr + dest * out_row_stride + cols, row, mask=mask)
+    tl.store(OUT_ptr + dest * out_row_stride + cols, row, mask=mask)  # bug: tl.store instead of tl.atomic_add: the last program to write a row wins
