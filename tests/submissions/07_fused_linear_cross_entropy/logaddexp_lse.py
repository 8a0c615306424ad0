# Mutant: right values and one block at a time, but torch combines the blocks: a block's logsumexp, then logaddexp.
# expect: test_vocab_blocked_lse delegated-to-library
# %% vocab_blocked_lse
-        m_new = torch.maximum(m, zb.amax(dim=-1))  # (T,)
-        # Notebook 05's rescale: each earlier term exp(z − m) becomes exp(z − m_new).
-        ell = ell * torch.exp(m - m_new) + torch.exp(zb - m_new[:, None]).sum(dim=-1)
-        m = m_new
-    return m + ell.log()
+        m = torch.logaddexp(m, zb.logsumexp(dim=-1))  # bug: torch keeps the running max and rescales for you
+    return m
