# Mutant: dropout without 1/(1 − p), and max-pool's argmax taken as a position in x instead of in its window.
# expect: test_dropout_backward scale
# expect: test_maxpool1d_backward wrong-values
# %% dropout_backward
-    return dy * mask / (1 - p)  # read ȳ and the mask (1 byte each), write x̄
+    return dy * mask  # bug: the mask is reused, but the forward's 1/(1 − p) is forgotten
# %% maxpool1d_backward
-    a = windows.argmax(dim=-1) + starts  # (..., L_out): where in x window j's max sits
+    a = windows.argmax(dim=-1)  # bug: the argmax within each window, never shifted by the window's start j · s
