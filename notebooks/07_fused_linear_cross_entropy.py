# %% [markdown]
# # 07 · The LM head: linear + cross-entropy without the logits
#
# A language model ends the same way every time: the last hidden states $h$ of shape $(T, d)$ — one
# row per token — are multiplied by the unembedding $W$ of shape $(V, d)$, one row per word of the
# vocabulary, and the logits $z = h W^\top$ of shape $(T, V)$ go into a cross-entropy against the next
# token. For a Llama 3 batch of $T = 8192$ tokens and its $V = 128{,}256$-word vocabulary, $z$ holds
# **1.05 G numbers, 4.2 GB in float32** — the biggest single tensor of the whole training step, larger
# than any activation of any layer. Its gradient $\bar z$ is the same size again.
#
# Nobody needs them. The loss is one number, $\bar h$ is $(T, d)$ and $\bar W$ is $(V, d)$. Liger-Kernel's
# *fused linear cross-entropy* and *Cut Cross-Entropy* (Wijmans et al., 2024: the loss's memory for
# Gemma 2 from 24 GB to about 1 MB) exist so that the $T \times V$ tensors are never held at once. This
# notebook builds that, in four steps:
#
# 1. **The backward, dense.** From notebooks 01 and 02 you already own every piece; put them together.
# 2. **Walk the tokens in chunks.** Form one chunk's logits and their gradient, use them, drop them.
# 3. **Walk the vocabulary in blocks.** The log-sum-exp of each row without ever holding a whole row.
# 4. **One buffer per chunk.** A Triton kernel that writes a chunk's gradient over its logits.
#
# | part | you write | points |
# |---|---|---|
# | A | `linear_ce_backward(h, W, target) -> (loss, dh, dW)` — dense, the reference derivation | 3 |
# | B | `chunked_linear_ce(h, W, target, chunk) -> (loss, dh, dW)` — never a $T \times V$ tensor | 3 |
# | C | `vocab_blocked_lse(h, W, block) -> lse` — $(T,)$, in vocabulary blocks | 2 |
# | D | `ce_grad_kernel` — `@triton.jit`, one row per program: a chunk's gradient written over its logits | 2 |
#
# **Notation** (from notebook 00). $L$ is the scalar loss; $\bar t = \partial L / \partial t$ has the shape
# of $t$ and is `dt` in code. A target of `-100` (`ignore_index`, as in `F.cross_entropy`) marks a token
# that takes no part in the loss — padding, or a prompt token in fine-tuning.
#
# Each test cell prints `✓ ...` when your function is right; when it is wrong, its first line names the
# kind of bug (`diagnosis: scale — ...`) and the next lines say where. Hints under each exercise are
# collapsed: open the first only when you are stuck.
# %%
import course

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from course.peak_memory import PeakMemory

F64 = torch.float64  # every gradient check in this course runs in float64
IGNORE = -100  # F.cross_entropy's ignore_index: a token whose target is this adds nothing to the loss
GB = 1e9  # decimal gigabytes, as GPU memory is sold


def randn(gen, *shape, dtype=F64):
    """Standard-normal values of the given shape, drawn from the generator `gen`."""
    return torch.randn(shape, generator=gen, dtype=dtype)

# %% [markdown]
# ## 1 · The forward, and what it holds
#
# For one token $t$ with hidden state $h_t$ $(d,)$ and target class $y_t$:
#
# $$z_t = W h_t \quad (V,), \qquad \ell_t = \operatorname{lse}(z_t) - z_{t, y_t}, \qquad
# \operatorname{lse}(z_t) = \log \sum_{v} e^{z_{t,v}},$$
#
# and the loss is the **mean** of $\ell_t$ over the tokens that count. Here is the forward as PyTorch
# users write it, on a toy head, with the bytes each line makes at Llama 3's sizes:
# %% check-output
T_GPU, V_GPU, D_GPU = 8192, 128_256, 4096  # tokens in a batch, Llama 3's vocabulary, its hidden size
gen = torch.Generator().manual_seed(7)
h = randn(gen, 5, 3)  # (T, d): 5 tokens, 3 features
W = randn(gen, 4, 3)  # (V, d): 4 classes
target = torch.tensor([2, 0, IGNORE, 3, 3])  # (T,): the third token does not count
z = h @ W.T  # (T, V) the logits: write T·V numbers
loss = F.cross_entropy(z, target, ignore_index=IGNORE)  # reads T·V, makes softmax-sized temporaries
print(f"loss = {loss.item():.6f} over {(target != IGNORE).sum().item()} counted tokens of {len(target)}")
print(f"at T = {T_GPU}, V = {V_GPU:,}: logits = {T_GPU * V_GPU / 1e9:.2f} G numbers = "
      f"{T_GPU * V_GPU * 4 / GB:.1f} GB in float32; h = {T_GPU * D_GPU * 4 / GB:.2f} GB, "
      f"W = {V_GPU * D_GPU * 4 / GB:.2f} GB")

# %% [markdown]
# The logits are 31 times the size of $h$ and twice that of the whole unembedding $W$, and autograd keeps
# them (or their log-softmax) for the backward, then makes $\bar z$ of the same size. The question of this notebook: **what does the backward actually need, and in which
# order can it be computed so that a $T \times V$ tensor never exists?** First, what the backward is.
#
# ## Part A — linear_ce_backward (3 points)
#
# Write the loss and both gradients, dense — this is the reference every later part must match:
#
# - `h` $(T, d)$, `W` $(V, d)$, `target` $(T,)$ int64 with values in $[0, V)$ or `-100`;
# - return `(loss, dh, dW)`: the scalar loss `F.cross_entropy(h @ W.T, target, ignore_index=-100)` would
#   give (a 0-dim tensor), $\bar h$ shaped like `h` and $\bar W$ shaped like `W`;
# - a token whose target is `ignore_index` (`-100`, the default) takes no part: not in the sum, not in the count;
# - logits of $\pm 1000$ must not overflow. No autograd, and not torch's own loss backward.
#
# Three questions to answer on paper first: what is $\bar z$, the gradient of the loss for the logits,
# given notebook 02's softmax–cross-entropy? What does the *mean* do to it? And given $\bar z$, what are
# $\bar h$ and $\bar W$ for $z = h W^\top$ — notebook 01's shapes decide.
# %% solution id=linear_ce_backward
def linear_ce_backward(h, W, target, ignore_index=-100):
    """loss = mean CE(h Wᵀ, target) over the tokens whose target is not -100, and its gradients.

    h (T, d), W (V, d), target (T,) int64 → (loss (), dh (T, d), dW (V, d)).
    """
    ### BEGIN SOLUTION
    T = h.shape[0]
    z = h @ W.T  # (T, V) the logits: write T·V
    m = z.amax(dim=-1, keepdim=True)  # (T, 1) each row's max, so that exp never overflows
    lse = m[:, 0] + torch.exp(z - m).sum(dim=-1).log()  # (T,) log-sum-exp: read T·V
    counted = target != ignore_index  # (T,) the tokens in the mean
    n = counted.sum()  # how many: the mean's count
    t = target.clamp(min=0)  # an ignored token reads class 0, then gets weight 0
    w = counted.to(h.dtype) / n  # (T,) each token's weight in the mean: 1/n, or 0 if ignored
    loss = ((lse - z.gather(1, t[:, None])[:, 0]) * w).sum()  # ()
    dz = torch.exp(z - lse[:, None])  # (T, V) the softmax P: write T·V
    dz[torch.arange(T), t] -= 1.0  # P − Y: the target's own logit
    dz *= w[:, None]  # (P − Y)/n on counted rows, 0 on ignored ones
    dh = dz @ W  # (T, d): read T·V
    dW = dz.T @ h  # (V, d): read T·V
    return loss, dh, dW
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — the derivation, one link at a time</summary>
#
# The chain is $h, W \to z = h W^\top \to \ell_t \to L$. Notebook 02's Part D gave the gradient of *one*
# token's cross-entropy for its logits: what was it, in terms of the softmax of the row and the target?
# Then $z = h W^\top$ is a matmul: notebook 01 says each gradient is a product of $\bar z$ with the *other*
# operand, and that only one placement of the transposes gives $\bar h$ the shape $(T, d)$ and $\bar W$ the
# shape $(V, d)$. Write the shapes down before the formula.
#
# </details>
#
# <details><summary>Hint 2 — the mean, and the tokens that do not count</summary>
#
# $L = \frac{1}{n} \sum_{t \text{ counted}} \ell_t$, where $n$ is the number of counted tokens — not $T$
# when some targets are `-100`. A token that does not count has no $\ell_t$ in the sum, so nothing flows
# back from it: its whole row of $\bar z$ is zero (and it adds nothing to $\bar h$'s row or to $\bar W$). Every
# counted row of $\bar z$ carries the same factor $1/n$. For the loss itself, subtract each row's max before
# `exp`, as notebook 02 did: $\operatorname{lse}(z) = m + \log \sum e^{z - m}$.
#
# </details>
#
# <details><summary>Hint 3 — the formulas, and the code</summary>
#
# With $P = \operatorname{softmax}(z)$ row by row and $Y$ the one-hot of the targets (both $(T, V)$), and
# the ignored rows of both set to zero,
#
# $$\bar z = (P - Y) / n, \qquad \bar h = \bar z\, W \;(T, d), \qquad \bar W = \bar z^\top h \;(V, d).$$
#
# In code, in this order: each row's log-sum-exp (max first); $P$ as the exponential of the logits minus
# their row's log-sum-exp; 1 subtracted at each row's target column (index the rows with `torch.arange`,
# and give an ignored row a harmless class such as 0 before indexing — its row is zeroed anyway); the
# whole of $\bar z$ scaled by $1/n$ and by 0 on ignored rows; then the two matmuls whose shapes come out
# as $(T, d)$ and $(V, d)$. The loss is the weighted sum of log-sum-exp minus the target's logit.
#
# </details>
# %% test id=test_linear_ce_backward points=3
"""linear_ce_backward: loss, dh and dW at batch 1, batch 7, V = d (square W),
targets with ignore_index (-100), transposed (non-contiguous) h and W, and
logits up to ±1000, against autograd of F.cross_entropy; no autograd inside."""
course.selfcheck.linear_ce_backward(linear_ce_backward)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.linear_ce_backward(linear_ce_backward)
### END HIDDEN TESTS

# %% [markdown]
# ### What you just derived
#
# Three rules you already had, chained:
#
# 1. **Softmax–cross-entropy** (notebook 02): one token's $\bar z_t = p_t - e_{y_t}$, the softmax minus the
#    one-hot of its target.
# 2. **The mean** divides every counted row by $n$, the number of counted tokens, and an ignored row has no
#    loss, so its gradient is zero:
#
# $$\boxed{\;\bar z = (P - Y) / n\;} \quad (T, V), \qquad \text{ignored rows } 0.$$
#
# 3. **The matmul** (notebook 01): $z = h W^\top$, so $\boxed{\;\bar h = \bar z\, W\;}$ $(T, d)$ and
#    $\boxed{\;\bar W = \bar z^\top h\;}$ $(V, d)$ — `dh = dz @ W`, `dW = dz.T @ h`.
#
# Now count what your function holds. Read it line by line at $T = 8192$, $V = 128{,}256$, float32:
#
# | line | makes | bytes |
# |---|---|---|
# | `z = h @ W.T` | the logits, $(T, V)$ | 4.2 GB |
# | `torch.exp(z - m)` | a temporary, $(T, V)$ | 4.2 GB |
# | $P = e^{z - \operatorname{lse}}$, then $\bar z$ in place | $(T, V)$ | 4.2 GB |
# | `dh`, `dW` | $(T, d)$ and $(V, d)$ | 0.13 + 2.1 GB |
#
# At its peak, two or three $T \times V$ tensors are alive at once: more than 8 GB for tensors nobody
# asked for. (Autograd of `F.cross_entropy` is no better: it saves the $T \times V$ log-softmax for the
# backward, which then makes two more tensors of that size.) But look at which rows of $\bar z$ each output needs. Row $t$ of $\bar z$ depends only on row $t$
# of $z$, that is on $h_t$ and $W$ — and $n$, a count known before anything is computed. So tokens can be
# processed a **chunk** at a time, in any order. That is Part B.
#
# ## Part B — chunked_linear_ce (3 points)
#
# Same inputs, same outputs as Part A, plus `chunk`, a number of tokens. Walk the tokens in chunks of
# `chunk` rows (the last one may be shorter, and `chunk` may exceed $T$): for each, form its logits and
# their gradient, use them, and let them go. The rule the check enforces: **no tensor of $T \times V$
# elements or more is ever allocated inside your call** (checked at $T = 400$, $V = 257$, chunks of 24:
# `materialized-logits` otherwise). Peak extra memory is then $O(\text{chunk} \cdot V)$, whatever $T$.
#
# Before you write it, decide what each chunk produces and where it goes: which outputs does a chunk
# *own* a piece of, and which does every chunk *contribute to*? What must be known before the first chunk?
# %% solution id=chunked_linear_ce
def chunked_linear_ce(h, W, target, chunk, ignore_index=-100):
    """Part A's (loss, dh, dW), walking the tokens `chunk` at a time: no (T, V) tensor is ever held.

    h (T, d), W (V, d), target (T,) int64, chunk ≥ 1 → (loss (), dh (T, d), dW (V, d)).
    """
    ### BEGIN SOLUTION
    T = h.shape[0]
    n = (target != ignore_index).sum()  # the mean's count, over all chunks: known before the walk
    loss = h.new_zeros(())  # ()
    dh = h.new_empty(h.shape)  # (T, d): each chunk fills its own rows
    dW = W.new_zeros(W.shape)  # (V, d): every chunk adds to it
    for s in range(0, T, chunk):
        rows = slice(s, s + chunk)
        hc, tc = h[rows], target[rows]  # (c, d), (c,): views, nothing copied
        zc = hc @ W.T  # (c, V) this chunk's logits, the only V-wide tensor: write c·V
        m = zc.amax(dim=-1, keepdim=True)  # (c, 1)
        lse = m[:, 0] + torch.exp(zc - m).sum(dim=-1).log()  # (c,)
        counted = tc != ignore_index
        t = tc.clamp(min=0)
        w = counted.to(h.dtype) / n  # (c,) 1/n for a counted token, 0 for an ignored one
        loss += ((lse - zc.gather(1, t[:, None])[:, 0]) * w).sum()
        dz = torch.exp(zc - lse[:, None])  # (c, V) P of the chunk, then its gradient in place
        dz[torch.arange(len(tc)), t] -= 1.0
        dz *= w[:, None]
        dh[rows] = dz @ W  # this chunk's rows of dh: read c·V
        dW += dz.T @ hc  # every chunk contributes to dW: read c·V, add V·d
    return loss, dh, dW
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — what a chunk needs, and what it produces</summary>
#
# A chunk of rows $c$ needs $h_c$, all of $W$, its targets — and $n$, counted over **all** $T$ tokens before
# the walk (a chunk that counts its own tokens gives each chunk its own mean). Part A's formulas, applied to
# the chunk's rows, give its share of the loss, its rows of $\bar z$, and from those a piece of each output.
#
# </details>
#
# <details><summary>Hint 2 — the mean across chunks</summary>
#
# The loss is one mean: $\frac{1}{n}\sum_t \ell_t$ over every counted token of every chunk. So each chunk
# adds its counted $\ell_t$ divided by the same $n$ — not its own mean, and not divided by $T$ when some
# targets are `-100`. Ignored rows of a chunk get a zero row of $\bar z$, as in Part A.
#
# </details>
#
# <details><summary>Hint 3 — the walk, and what must never exist</summary>
#
# $\bar h$'s rows belong to one chunk each: `dh[rows] = dz @ W`. $\bar W = \bar z^\top h$ is a sum over **all**
# tokens, so every chunk adds its part into one accumulator made before the loop:
# `dW += dz.T @ h[rows]` (an `=` there keeps the last chunk only). Only `h[rows] @ W.T` — $(c, V)$ — is
# computed per chunk; `h @ W.T`, even sliced afterwards, builds all $T \times V$ first. Allocate `dh` with
# `h.new_empty(h.shape)`, `dW` with `W.new_zeros(W.shape)`, the loss as a 0-dim zero you add into.
#
# </details>
# %% test id=test_chunked_linear_ce points=3
"""chunked_linear_ce: loss, dh and dW at batch 1, batch 7 with chunks that do
not divide T, V = d, ignore_index targets spread unevenly over the chunks,
transposed h and W, logits up to ±1000, against autograd; then no tensor of
T×V elements at T = 400, V = 257, chunks of 24; no autograd inside."""
course.selfcheck.chunked_linear_ce(chunked_linear_ce)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.chunked_linear_ce(chunked_linear_ce)
### END HIDDEN TESTS

# %% [markdown]
# ### What you just wrote: the walk of a fused linear cross-entropy
#
# For each chunk $c$ of rows, with $n$ counted once over all $T$ tokens:
#
# $$\bar z_c = (P_c - Y_c)/n, \qquad \bar h_c = \bar z_c W, \qquad \boxed{\;\bar W \mathrel{+}= \bar z_c^\top h_c\;}$$
#
# — each chunk *owns* its rows of $\bar h$ and *contributes to* all of $\bar W$, notebook 01's law again
# (a value read by many outputs collects the gradient of all of them: $W$ is read by every token). The
# chunk's logits $z_c$ become its gradient $\bar z_c$ in place and are dropped before the next chunk, so at
# chunk $= 1024$ the V-wide tensors are $1024 \times 128{,}256 \times 4$ bytes $= 0.53$ GB instead of 4.2 GB
# each — whatever $T$ is. This is Liger-Kernel's `FusedLinearCrossEntropy`: its Triton kernel computes the
# chunk's loss and writes $\bar z_c$ **over** $z_c$ in the same buffer, and the forward pass already returns
# $\bar h$ and $\bar W$ (the backward only scales them by the upstream gradient of the loss).
#
# What did it cost? The same FLOPs as Part A: $2 T V d$ for the logits and $4 T V d$ for the two gradient
# matmuls, now in $T / \text{chunk}$ smaller matmuls. Small chunks starve the GPU's matmul units; large ones
# bring the memory back. And the $T \times V$ problem has only been turned sideways: at chunk $c$, each
# chunk still holds $c \times V$, and $V$ keeps growing (Gemma's is about 256,000).
#
# ## 2 · Walking the vocabulary instead
#
# Cut Cross-Entropy goes further: it never holds a full row of logits either. The loss of token $t$ needs
# two things from its row: $z_{t, y_t}$ — one dot product $\langle h_t, W_{y_t} \rangle$, cheap — and
# $\operatorname{lse}(z_t)$, a reduction over all $V$ classes. A reduction can walk the vocabulary in
# **blocks** of columns, if it carries the right summary from one block to the next. Notebook 05 met the
# same problem in attention's softmax, whose rows were too long to hold.
#
# ## Part C — vocab_blocked_lse (2 points)
#
# - `h` $(T, d)$, `W` $(V, d)$, `block` $\ge 1$ a number of classes;
# - return `lse`, shape $(T,)$: $\log \sum_v e^{z_{t,v}}$ for each row of $z = h W^\top$;
# - walk the vocabulary in blocks of `block` rows of `W` (the last may be shorter, or `block` may exceed
#   $V$): each step computes only `h @ W[j:j + block].T`, $(T, \text{block})$;
# - no tensor of $T \times V$ elements or more (checked at $T = 301$, $V = 347$, blocks of 21), and logits of
#   $\pm 1000$ must not overflow: carry a max. No `torch.logsumexp` over the whole row, of course.
#
# What does a block need to carry to the next so that, at the end, one line gives the log-sum-exp? And what
# happens to what was carried when a later block holds a larger logit?
# %% solution id=vocab_blocked_lse
def vocab_blocked_lse(h, W, block):
    """(T,) log-sum-exp of each row of h Wᵀ, walking the vocabulary `block` classes at a time.

    h (T, d), W (V, d), block ≥ 1 → lse (T,). Holds (T, block) logits at a time, never (T, V).
    """
    ### BEGIN SOLUTION
    T, V = h.shape[0], W.shape[0]
    m = h.new_full((T,), float("-inf"))  # (T,) running max of the row
    s = h.new_zeros(T)  # (T,) running sum of exp(z − m)
    for j in range(0, V, block):
        zb = h @ W[j:j + block].T  # (T, b) this block's logits: write T·b
        m_new = torch.maximum(m, zb.amax(dim=-1))  # (T,)
        # Bring the old sum to the new max: each earlier term exp(z − m) becomes exp(z − m_new).
        s = s * torch.exp(m - m_new) + torch.exp(zb - m_new[:, None]).sum(dim=-1)
        m = m_new
    return m + s.log()
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — what to carry</summary>
#
# Two numbers per row: the largest logit seen so far, $m$, and the sum of the exponentials seen so far,
# measured from that max, $s = \sum_{\text{seen}} e^{z - m}$. At the end, $\operatorname{lse} = m + \log s$.
# Start from $m = -\infty$ and $s = 0$ (`h.new_full((T,), float("-inf"))`, `h.new_zeros(T)`).
#
# </details>
#
# <details><summary>Hint 2 — when the max grows</summary>
#
# A new block may hold a larger logit: the new max $m'$ is the larger of $m$ and the block's own max.
# Every term already in $s$ was measured from the old $m$; measured from $m'$, each one is smaller by the
# same factor. Which factor, and is it below or above 1? (At the first block $m = -\infty$: check that your
# factor is 0 there, not NaN.)
#
# </details>
#
# <details><summary>Hint 3 — the update, and the code</summary>
#
# For a block with logits $z_b$ $(T, b)$: $m' = \max(m, \max_v z_b)$, then
#
# $$s' = s \cdot e^{m - m'} + \sum_{v \in b} e^{z_{b,v} - m'}.$$
#
# In code: start $m$ at $-\infty$ and $s$ at 0, one of each per row; for each block, its logits, the new
# max with `torch.maximum`, then $s'$ exactly as written (the old sum rescaled by $e^{m - m'}$ — which is 0,
# not NaN, on the first block — plus the block's own sum measured from $m'$), and $m'$ becomes $m$. After the
# last block, $\operatorname{lse} = m + \log s$.
#
# </details>
# %% test id=test_vocab_blocked_lse points=2
"""vocab_blocked_lse: batch 1, batch 7, blocks that do not divide V, transposed
h and W, logits up to ±1000 (a running max that grows from block to block),
against torch.logsumexp; then no tensor of T×V elements at T = 301, V = 347."""
course.selfcheck.vocab_blocked_lse(vocab_blocked_lse)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.vocab_blocked_lse(vocab_blocked_lse)
### END HIDDEN TESTS

# %% [markdown]
# ### What you just wrote: the online log-sum-exp
#
# $$\boxed{\;m' = \max(m, \max_{v \in b} z_v), \qquad s' = s\, e^{m - m'} + \sum_{v \in b} e^{z_v - m'}, \qquad
# \operatorname{lse} = m + \log s\;}$$
#
# — the same rescaling as FlashAttention's online softmax. With it, Cut Cross-Entropy's forward holds
# $(T, \text{block})$ logits at a time and keeps $\operatorname{lse}$, **one number per token**. Its backward
# walks the blocks again: block $b$'s gradient is $\bar z_b = (e^{z_b - \operatorname{lse}} - Y_b)/n$ — recomputed
# from $h$, $W_b$ and the saved $\operatorname{lse}$, exactly as notebook 05 recomputed $P$ from $L$ — and adds
# $\bar z_b W_b$ into $\bar h$ and writes $\bar z_b^\top h$ into block $b$'s rows of $\bar W$. Nothing of size
# $T \times V$, and nothing of size $c \times V$ either: $O(T \cdot \text{block})$. In a real kernel the blocks
# live in on-chip SRAM and never touch HBM at all.
# %% [markdown]
# ## Part D — ce_grad_kernel (2 points)
#
# Part B's chunk held its logits $z_c$ and, beside them, the `exp` temporary and $\bar z_c$: three $(c, V)$
# tensors. Liger-Kernel holds one. Its Triton kernel reads a row of the chunk's logits, computes the row's loss
# and then **writes the row's gradient over the logits themselves**, in the same buffer: once $\bar z_c$ is
# known, nobody needs $z_c$ again. Write that kernel. It is launched as
#
# ```python
# ce_grad_kernel[(rows,)](z, target, loss, z.stride(0), V, float(n), BLOCK_V=BLOCK_V)
# ```
#
# - `Z_ptr`: the chunk's logits $(\text{rows}, V)$, each row's $V$ values adjacent in memory and the rows
#   `z_row_stride` apart; on return, each row holds its gradient $\bar z = (\operatorname{softmax}(z) - e_y)/n$.
# - `TARGET_ptr`: the chunk's targets $(\text{rows},)$, int64, a class in $[0, V)$ or `-100`; read-only.
# - `LOSS_ptr`: $(\text{rows},)$, where the row writes its share of the loss, $(\operatorname{lse}(z) - z_y)/n$.
# - A row whose target is `-100` writes a loss of 0 and a row of zeros.
# - `n`: the number of counted tokens of the **whole batch** (not of the chunk), a float.
# - One program per row. $V$ may be far wider than a block: walk the row in `BLOCK_V`-wide pieces, with
#   Part C's running max and sum, then walk it again to write. No store may land past the row's $V$ values.
# - Compute in the logits' dtype (float64 in the check's gradcheck).
#
# The test cell launches it on chunks inside a wider buffer whose padding holds NaN, with $V$ not a power of
# two and wider than `BLOCK_V`, in float32 and float64, against autograd of `F.cross_entropy`, then runs a
# float64 gradcheck through it: the gradient it writes must be the derivative of the loss it writes.
# %%
import triton
import triton.language as tl

DEVICE = course.DEVICE  # cuda with a GPU; else cpu, with the kernel in Triton's interpreter


def unfinished(exc):
    """Whether `exc` comes from a kernel that still raises course.todo(): Triton wraps what a kernel raises in its
    own error (and cannot compile a stub on a GPU), so look at the message and the whole chain of causes."""
    while exc is not None:
        if isinstance(exc, NotImplementedError) or "course.todo()" in str(exc):
            return True
        exc = exc.__cause__
    return False


def ce_loss_and_grad_inplace(z, target, n, BLOCK_V=128):
    """Given: one chunk's loss (a 0-dim tensor) from ce_grad_kernel; z (rows, V) then holds its gradient."""
    loss = torch.empty(z.shape[0], dtype=z.dtype, device=z.device)  # (rows,)
    ce_grad_kernel[(z.shape[0],)](z, target, loss, z.stride(0), z.shape[1], float(n), BLOCK_V=BLOCK_V)
    return loss.sum()
# %% solution id=ce_grad_kernel
@triton.jit
def ce_grad_kernel(
    Z_ptr,  # (rows, V) the chunk's logits; overwritten by their gradient
    TARGET_ptr,  # (rows,) int64 class ids, or -100 for a token that does not count
    LOSS_ptr,  # (rows,) each row's share of the loss
    z_row_stride,  # elements from one row of Z to the next
    V,  # the length of a row: the vocabulary
    n,  # float: the counted tokens of the whole batch
    BLOCK_V: tl.constexpr,  # a power of two: the columns one step of the walk reads
):
    """One row per program: its share of the loss to LOSS, and the loss's gradient for its logits written over them.

    Reads the row twice and writes it once; a row whose target is -100 gets 0 and a row of zeros.
    """
    ### BEGIN SOLUTION
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2³¹ on a large chunk
    z_row = Z_ptr + row * z_row_stride
    cols = tl.arange(0, BLOCK_V)  # (BLOCK_V,)
    dtype = Z_ptr.dtype.element_ty
    y = tl.load(TARGET_ptr + row)
    counted = y != -100
    t = tl.where(counted, y, 0)  # an ignored row reads class 0, then gets weight 0
    scale = tl.where(counted, tl.full([], 1.0, dtype) / n, 0.0).to(dtype)  # 1/n in the logits' dtype, or 0
    acc = tl.zeros([], tl.float32) + tl.zeros([], dtype)  # 0 in float32, or float64 for float64 logits
    m = acc - float("inf")  # running max of the row; half-precision logits are summed in float32
    s = acc  # running sum of exp(z − m)
    for start in range(0, V, BLOCK_V):  # first walk: Part C's online log-sum-exp
        mask = start + cols < V
        z = tl.load(z_row + start + cols, mask=mask, other=float("-inf"))  # masked lanes add exp(−inf) = 0
        m_new = tl.maximum(m, tl.max(z, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new), axis=0)
        m = m_new
    lse = m + tl.log(s)
    tl.store(LOSS_ptr + row, (lse - tl.load(z_row + t)) * scale)  # read z_target before it is overwritten
    for start in range(0, V, BLOCK_V):  # second walk: the gradient over the logits
        mask = start + cols < V
        z = tl.load(z_row + start + cols, mask=mask, other=0.0)
        p = tl.exp(z - lse)  # this piece of the softmax
        onehot = tl.where(start + cols == t, 1.0, 0.0)
        g = (p - onehot) * scale
        tl.store(z_row + start + cols, g, mask=mask)
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — two walks over the row</summary>
#
# The gradient of every column needs the row's log-sum-exp, and that is known only once the whole row has been
# read. So walk the row twice: the first walk carries Part C's running max and sum from piece to piece (a masked
# lane must add nothing: what `other` gives it decides that), and ends with the log-sum-exp and the row's loss;
# the second walk reads each piece again and stores its gradient over it. Read $z_y$, the target's own logit,
# between the two, before the second walk overwrites it. Check the sign against Part A's $\bar z$.
#
# </details>
#
# <details><summary>Hint 2 — n, the ignored rows, and the dtype</summary>
#
# Every counted row carries the same factor $1/n$, with $n$ the batch's count, passed in: the chunk does not
# count its own tokens. A row whose target is `-100` has no loss, so its share is 0 and its gradient is zero —
# but it must not read `Z_ptr + (-100)` either: give it a harmless class before any load, and a factor of 0.
# `n` reaches a compiled kernel as a float32 scalar: $1/n$ taken in float32 loses the digits float64 keeps, so
# divide a value already in the logits' dtype by it (`Z_ptr.dtype.element_ty` is that dtype).
#
# </details>
#
# <details><summary>Hint 3 — the code</summary>
#
# Per program: the row index, `tl.program_id(0)` cast to int64; the row's start, `Z_ptr` plus the row times
# `z_row_stride`; the target `y`, a safe class `tl.where(y != -100, y, 0)` and a factor `scale` that is $1/n$ on a
# counted row and 0 on an ignored one. The first walk, over `range(0, V, BLOCK_V)`, loads each piece under the
# mask `start + cols < V` with `other=float("-inf")` and updates `m` and `s` as in Part C (both 0-d, in float32
# at least — float64 for float64 logits, float32 for half-precision ones, which a sum of V terms needs: adding
# `tl.zeros([], tl.float32)` and `tl.zeros([], dtype)` gives that type); then the log-sum-exp is
# `m + tl.log(s)` and the loss `(lse - z_y) * scale`. The second walk loads each piece again with `other=0.0`,
# turns each piece into its softmax with the log-sum-exp, subtracts 1 in the one column that is the target
# (compare the column indices with `t` under `tl.where`), scales by `scale` and stores it under the mask.
#
# </details>
# %% test id=test_ce_grad_kernel points=2
"""ce_grad_kernel: chunks of 1 to 7 rows inside a wider NaN-padded buffer, V
not a power of two and wider than BLOCK_V, ignored targets, n counting other
chunks' tokens, logits up to ±1000, float32 and float64, against autograd of
F.cross_entropy; the padding left untouched; a float64 gradcheck."""
course.selfcheck.ce_grad_kernel(ce_grad_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.ce_grad_kernel(ce_grad_kernel)
### END HIDDEN TESTS

# %% [markdown]
# ### What you just wrote: Liger's trick
#
# One program per row reads the row, keeps two numbers (the running max and sum), writes one loss, then reads
# the row again and writes $\boxed{\;\bar z = (P - Y)/n\;}$ **over** it, in code `g = (p - onehot) * scale`.
# The chunk's logits and their gradient are one $(c, V)$ buffer: at chunk $= 1024$ that is 0.53 GB, where Part
# B's chunk held three of that size. The chunk's matmuls then read the gradient from that same buffer:
# $\bar h_c = \bar z_c W$ and $\bar W \mathrel{+}= \bar z_c^\top h_c$. Here is one chunk of Part B through the
# kernel, against `F.cross_entropy`:
# %% check-output
gen = torch.Generator().manual_seed(8)
h, W = randn(gen, 6, 4), randn(gen, 9, 4)  # one chunk of 6 tokens, V = 9
target = torch.tensor([3, IGNORE, 0, 8, 5, 2])
n = 11  # the batch's counted tokens: this chunk's 5 and 6 in other chunks
z = (h @ W.T).to(DEVICE)  # (c, V): the only V-wide buffer of the chunk
try:
    loss_c = ce_loss_and_grad_inplace(z, target.to(DEVICE), n, BLOCK_V=4)  # z now holds the chunk's gradient
    dz = z.cpu()
    ref = F.cross_entropy(h @ W.T, target, ignore_index=IGNORE, reduction="sum") / n
    print(f"chunk's loss {loss_c.item():.6f} (F.cross_entropy: {ref.item():.6f}); dh_c = dz @ W {tuple((dz @ W).shape)}, "
          f"its rows for ignored tokens zero: {bool((dz[target == IGNORE] == 0).all())}")
except Exception as exc:
    if not unfinished(exc):
        raise
    print("Finish Part D first: this cell runs ce_grad_kernel.")

# %% [markdown]
# ## 3 · Measured: peak memory against T
#
# Now the three ways, on this CPU, with `PeakMemory` from `course.peak_memory`: it follows every tensor
# torch allocates and frees inside a `with` block and keeps the highest total (`torch.cuda.max_memory_allocated`
# for a CPU). Float32, $V = 2048$, $d = 64$; chunks of 128 tokens, blocks of 256 classes:
#
# - **unfused**: PyTorch as people write it, `F.cross_entropy(h @ W.T, target)` and its autograd backward;
# - **chunked**: your `chunked_linear_ce` (forward and backward together);
# - **vocabulary-blocked**: your `vocab_blocked_lse`, the forward's reduction (its backward walks the same
#   blocks, with the same memory).
#
# Every curve is also read for what it implies on a GPU: the peak minus the outputs, divided by one
# logits-sized tensor of its kind ($T \times V$, chunk $\times V$, $T \times$ block), times that tensor at
# $T = 8192$, $V = 128{,}256$ in float32, with chunks of 1024 and blocks of 4096 there.
# %%
V_CPU, D_CPU, CHUNK, BLOCK = 2048, 64, 128, 256  # the measured head
CHUNK_GPU, BLOCK_GPU = 1024, 4096  # what a GPU kernel would use at Llama 3's sizes
T_SIZES = [256, 512, 1024, 2048]
F32 = 4  # bytes per float32


def unfused(h, W, target):
    """PyTorch's loss and its autograd backward: the T×V logits held, with their gradient."""
    leaves = [h.detach().requires_grad_(True), W.detach().requires_grad_(True)]
    loss = F.cross_entropy(leaves[0] @ leaves[1].T, target, ignore_index=IGNORE)
    return (loss.detach(), *torch.autograd.grad(loss, leaves))


def peak_bytes(fn, *args):
    """The most bytes of tensors made inside fn(*args) that were alive at one time."""
    with PeakMemory() as mem:
        out = fn(*args)
    del out
    return mem.peak


# name: (function, its arguments given h, W, target; bytes of its outputs; one logits-sized tensor on the CPU,
# the same at T = 8192 and V = 128,256 on a GPU)
WAYS = {
    "unfused (PyTorch autograd)": (unfused, lambda h, W, t: (h, W, t),
                                   lambda T: (T * D_CPU + V_CPU * D_CPU) * F32,
                                   lambda T: T * V_CPU * F32, T_GPU * V_GPU * F32),
    f"chunked, {CHUNK} tokens (yours)": (chunked_linear_ce, lambda h, W, t: (h, W, t, CHUNK),
                                         lambda T: (T * D_CPU + V_CPU * D_CPU) * F32,
                                         lambda T: CHUNK * V_CPU * F32, CHUNK_GPU * V_GPU * F32),
    f"vocabulary-blocked LSE, {BLOCK} classes (yours)": (vocab_blocked_lse, lambda h, W, t: (h, W, BLOCK),
                                                          lambda T: T * F32,
                                                          lambda T: T * BLOCK * F32, T_GPU * BLOCK_GPU * F32),
}
measured = {}
gen = torch.Generator().manual_seed(77)
W = randn(gen, V_CPU, D_CPU, dtype=torch.float32) / D_CPU ** 0.5  # (V, d)
for name, (fn, args, *_) in WAYS.items():
    try:
        for T in T_SIZES:
            h = randn(gen, T, D_CPU, dtype=torch.float32)  # (T, d)
            target = torch.randint(0, V_CPU, (T,), generator=gen)  # (T,)
            measured.setdefault(name, {})[T] = peak_bytes(fn, *args(h, W, target))
    except NotImplementedError:
        print(f"Finish {'Part B' if 'chunked' in name else 'Part C'} first: this cell measures it.")

MB = 1e6
fig, ax = plt.subplots(figsize=(7.2, 4.4))
for (name, by_T), nudge in zip(measured.items(), (0, -14, 14)):  # points: keep the last two labels apart
    *_, outputs, one, one_gpu = WAYS[name]
    Ts = list(by_T)
    line, = ax.loglog(Ts, [by_T[T] / MB for T in Ts], marker="o", label=name)
    T_last = Ts[-1]
    held = (by_T[T_last] - outputs(T_last)) / one(T_last)  # logits-sized tensors alive at the peak
    ax.annotate(f"{held:.1f} × {one_gpu / GB:.2f} GB\n→ {held * one_gpu / GB:.2f} GB at T = 8192",
                (T_last, by_T[T_last] / MB), xytext=(8, nudge), textcoords="offset points", fontsize=8,
                color=line.get_color(), va="center")
ax.set_xticks(T_SIZES, [str(T) for T in T_SIZES])
ax.minorticks_off()
ax.set_xlim(T_SIZES[0] / 1.3, T_SIZES[-1] * 4.5)
ax.set(xlabel="tokens T", ylabel="peak memory inside the call (MB)",
       title=f"LM head loss and gradients, V = {V_CPU}, d = {D_CPU}, float32 (measured)")
ax.grid(True, which="major", alpha=0.3)
ax.legend(fontsize=8, loc="upper left")
plt.show()

# %% [markdown]
# The unfused curve climbs with slope 1 on these axes and sits an order of magnitude above the others: at
# its peak it holds about three $T \times V$ tensors (the log-softmax autograd saved, its gradient, and the
# logits' gradient being formed) — over 12 GB at $T = 8192$ before the model has spent a byte on anything else. The
# chunked walk holds about four chunk-sized tensors (the chunk's logits, the `exp` temporary, $\bar z_c$ and a
# product) whatever $T$ — about 2 GB at chunks of 1024, and a Triton kernel that writes $\bar z_c$ over $z_c$
# needs one. What still grows with $T$ is $\bar h$, $(T, d)$, which has to exist anyway. The
# vocabulary-blocked reduction grows with $T$, but with the block, not the vocabulary, as the other factor:
# three $T \times \text{block}$ tensors, 0.4 GB at $T = 8192$, and less than that once the blocks live in SRAM.
#
# ## What to take away
#
# - The LM head's backward is three lines you already knew: $\bar z = (P - Y)/n$ over the counted tokens,
#   $\bar h = \bar z W$, $\bar W = \bar z^\top h$. Ignored targets leave the sum **and** the count.
# - Row $t$ of $\bar z$ needs only row $t$ of $z$ and the global count, so the tokens can be walked in chunks:
#   each chunk owns its rows of $\bar h$, and **adds** into $\bar W$. Peak memory $O(\text{chunk} \cdot V)$
#   instead of $O(T V)$ — Liger-Kernel's fused linear cross-entropy.
# - The log-sum-exp is a reduction with an online max and a rescaled sum, so the vocabulary can be walked
#   too: $O(T \cdot \text{block})$, and with the backward recomputing each block from the saved
#   $\operatorname{lse}$, Cut Cross-Entropy never holds a row of logits at all.
# - Same FLOPs, a few GB less: when memory is the limit, walking beats holding.
