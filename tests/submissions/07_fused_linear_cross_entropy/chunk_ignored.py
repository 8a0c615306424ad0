# Mutant: right values, but the walk ignores `chunk` and takes the tokens in two halves: (T/2)×V logits at once.
# expect: test_chunked_linear_ce materialized-logits
# %% chunked_linear_ce
-    for s in range(0, T, chunk):
+    chunk = -(-T // 2)  # bug: `chunk` overwritten, two halves of the tokens whatever the caller asked
+    for s in range(0, T, chunk):
