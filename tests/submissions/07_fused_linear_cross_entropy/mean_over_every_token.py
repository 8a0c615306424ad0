# Mutant: the mean divides by all T tokens, the ignored ones (target −100) included.
# expect: test_linear_ce_backward scale
# expect: test_chunked_linear_ce scale
# %% linear_ce_backward
-    n = counted.sum()  # how many: the mean's count
+    n = T  # bug: every token counted, though ignored ones take no part in the mean
# %% chunked_linear_ce
-    n = (target != ignore_index).sum()  # the mean's count, over all chunks: known before the walk
+    n = T  # bug: the count includes the tokens whose target is ignore_index
