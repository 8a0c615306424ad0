# %% [markdown]
# # 07 · The LM head: linear + cross-entropy without the logits
#
# A language model ends the same way every time: the last hidden states $h$ of shape $(T, d)$ — one
# row per token — are multiplied by the unembedding $W$ of shape $(V, d)$, one row per word of the
# vocabulary, and the logits $z = h W^\top$ of shape $(T, V)$ go into a cross-entropy against the next
# token. For a Llama 3 batch of $T = 8192$ tokens and its $V = 128{,}256$-word vocabulary, $z$ holds
# **1.05 G numbers, 4.2 GB in float32**, and its gradient $\bar z$ is the same size again. Once attention is
# fused (notebook 05: FlashAttention never holds its scores), that is the biggest single tensor of the training
# step, larger than any activation of any layer. With eager attention it is not: for one 8192-token sequence,
# each layer of Llama-3-8B makes scores of 32 heads × 8192² = 2.1 G numbers, twice the logits, and every layer
# makes its own. Fuse attention first; then the LM head is what is left.
#
# Nobody needs them. The loss is one number, $\bar h$ is $(T, d)$ and $\bar W$ is $(V, d)$. Liger-Kernel's
# *fused linear cross-entropy* and *Cut Cross-Entropy* (Wijmans et al., 2024: the loss's memory for
# Gemma 2 from 24 GB to about 1 MB) exist so that the $T \times V$ tensors are never held at once. This
# notebook builds that, in four steps:
#
# 1. **The backward, dense.** Notebooks 01 and 02 derived its algebra; what the LM head adds is the mean over
#    the tokens that count and the head's layout and size.
# 2. **Walk the tokens in chunks.** Form one chunk's logits and their gradient, use them, drop them.
# 3. **Walk the vocabulary in blocks.** The log-sum-exp of each row without ever holding a whole row.
# 4. **One buffer per chunk.** A Triton kernel that writes a chunk's gradient over its logits.
#
# | part | you write | points |
# |---|---|---|
# | A | `linear_ce_backward(h, W, target) -> (loss, dh, dW)` — dense: ignored tokens, the mean, W's layout | 3 |
# | B | `chunked_linear_ce(h, W, target, chunk) -> (loss, dh, dW)` — `chunk` rows of logits at a time | 3 |
# | C | `vocab_blocked_lse(h, W, block) -> lse` — $(T,)$, in vocabulary blocks, combined by your own code | 2 |
# | D | `ce_grad_kernel` — `@triton.jit`, one row per program: a chunk's gradient written over its logits | 2 |
#
# **Notation** (from notebook 00). $L$ is the scalar loss; $\bar t = \partial L / \partial t$ has the shape
# of $t$ and is `dt` in code. A target of `-100` (`ignore_index`, as in `F.cross_entropy`) marks a token
# that takes no part in the loss — padding, or a prompt token in fine-tuning.
#
# Each test cell prints `✓ ...` when your function is right; when it is wrong, its first line names the
# kind of bug (`diagnosis: scale — ...`), the next lines say where, and the last points to the hint about it.
# Hints under each exercise are collapsed and ask questions, from the first to ask to a partial step: open the
# first only when you are stuck. The answer itself is in the collapsed recap after the test cell, for once your
# check passes.
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
# them (or their log-softmax) for the backward, then makes $\bar z$ of the same size. The question of this
# notebook: **what does the backward actually need, and in which order can it be computed so that a
# $T \times V$ tensor never exists?** First, what the backward is.
#
# ### What you already derived
#
# The algebra of this head is not new; take it as given:
#
# - **From notebook 02** (Part D, the collapse): for one token with logits $z_t$ $(V,)$ and target $y_t$, the
#   gradient of $\ell_t = \operatorname{lse}(z_t) - z_{t, y_t}$ for its logits is
#   $\operatorname{softmax}(z_t) - e_{y_t}$, the row's softmax minus 1 at the target's column. Notebook 02
#   averaged that over all $M$ rows of a batch; which rows an LM head averages over is the new question.
# - **From notebook 02** (Part C): subtracting a row's max from its logits before `exp` changes no value and
#   keeps every `exp` finite.
# - **From notebook 01** (Part A): for $y = x\,w$ with $x$ $(M, K)$ and $w$ $(K, N)$, $\;\bar x = \bar y\, w^\top$
#   and $\bar w = x^\top \bar y$ — each gradient is $\bar y$ times the *other* operand, transposed to fit.
#
# ## Part A — linear_ce_backward (3 points)
#
# Write the loss and both gradients, dense — the reference every later part must match:
#
# - `h` $(T, d)$, `W` $(V, d)$, `target` $(T,)$ int64 with values in $[0, V)$ or `-100`;
# - return `(loss, dh, dW)`: the scalar loss `F.cross_entropy(h @ W.T, target, ignore_index=-100)` would
#   give (a 0-dim tensor), $\bar h$ shaped like `h` and $\bar W$ shaped like `W`;
# - logits of $\pm 1000$ must not overflow. No autograd, and not torch's own loss backward.
#
# What is new here, and what to work out on paper first:
#
# 1. **Which tokens count.** A token whose target is `-100` (padding, a prompt token) takes no part: not in
#    the sum, and not in the count. The loss is the mean over the $n$ tokens that count — not over $T$. What
#    does that do to each row of $\bar z$, a counted one and an ignored one?
# 2. **The head's layout.** An LM head stores $W$ as $(V, d)$, one row per word (`nn.Linear`'s weight is
#    out × in), so $z = h W^\top$, not notebook 01's $x\,w$. Which of 01's symbols is $W^\top$ here, and how do
#    you turn the gradient 01 gives for it into one shaped like $W$?
# 3. **The size.** As you write each line, note beside it the $(T, V)$ tensors it makes: after the check, the
#    recap counts them at Llama 3's sizes, and that count is what Parts B–D take apart.
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
# <details><summary>Hint 1 — which tokens count, and by how much</summary>
#
# Write the loss as $L = \frac{1}{n} \sum_{t \text{ counted}} \ell_t$. What is $\partial L / \partial \ell_t$ for a
# counted token, and for an ignored one, which has no $\ell_t$ in the sum at all? Try three tokens with targets
# $(2, -100, 0)$: what is $n$, and what weight does each token's $\ell_t$ carry? Row $t$ of $\bar z$ is notebook
# 02's per-token gradient times that weight. Note that $n$ is one number for the whole batch, known before any
# logit is computed.
#
# </details>
#
# <details><summary>Hint 2 — the layout of W</summary>
#
# In notebook 01's $y = x\,w$, put $x = h$ and $w = W^\top$ $(d, V)$. Then 01 gives $\bar h$ at once, and the
# gradient of $W^\top$, shaped $(d, V)$. $W$'s own gradient is the transpose of that: what is the transpose of a
# product of two matrices? Check your result by its shape: $\bar z$ is $(T, V)$, $h$ is $(T, d)$, and $\bar W$
# must come out $(V, d)$. Only one product of those two, transposed or not, has that shape.
#
# </details>
#
# <details><summary>Hint 3 — ignored rows in code, and logits of ±1000</summary>
#
# An ignored target cannot index a column: `-100` would read column $V - 100$ (indexing counts from the end),
# or raise when $V < 100$. Give an ignored row any valid class before indexing (its weight is 0, so which one
# does not matter), and make the weight 0 on ignored rows and $1/n$ on counted ones, as a `(T,)` tensor built
# from the comparison of `target` with `ignore_index`. For the loss, each row's log-sum-exp needs notebook 02's
# max: with $m$ the row's max, $\operatorname{lse}(z) = m + \log \sum_v e^{z_v - m}$, and the loss is the
# weighted sum of $\operatorname{lse}(z_t) - z_{t, y_t}$. Which of torch's reductions gives each row's max?
# `gather` (or `torch.arange` for the rows) reads one column per row.
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
# <details><summary>What you just derived (open once your check passes)</summary>
#
# Notebook 02's per-token gradient, weighted by the mean over the tokens that count, then notebook 01's
# matmul rule with $W^\top$ in the place of $w$:
#
# 1. **The mean** gives every counted row the weight $1/n$, $n$ the number of counted tokens, and an ignored
#    row has no loss, so its gradient is zero. With $P = \operatorname{softmax}(z)$ row by row and $Y$ the
#    one-hot of the targets, both with their ignored rows set to zero:
#
# $$\boxed{\;\bar z = (P - Y) / n\;} \quad (T, V).$$
#
# 2. **The layout.** $z = h W^\top$ is 01's $x\,w$ with $w = W^\top$: $\bar h = \bar z\,(W^\top)^\top = \bar z\, W$
#    $(T, d)$, and the gradient of $W^\top$ is $h^\top \bar z$ $(d, V)$, whose transpose is
#
# $$\boxed{\;\bar W = \bar z^\top h\;} \quad (V, d)$$
#
#    — in code `dh = dz @ W` and `dW = dz.T @ h`; `h.T @ dz` is the same numbers laid out as $(d, V)$.
#
# 3. **The size.** Read your function line by line at $T = 8192$, $V = 128{,}256$, float32:
#
# | line | makes | bytes |
# |---|---|---|
# | `z = h @ W.T` | the logits, $(T, V)$ | 4.2 GB |
# | `torch.exp(z - m)` | a temporary, $(T, V)$ | 4.2 GB |
# | $P = e^{z - \operatorname{lse}}$, then $\bar z$ in place | $(T, V)$ | 4.2 GB |
# | `dh`, `dW` | $(T, d)$ and $(V, d)$ | 0.13 + 2.1 GB |
#
# At its peak two or three $T \times V$ tensors are alive at once: more than 8 GB for tensors nobody asked
# for. (Autograd of `F.cross_entropy` is no better: it saves the $T \times V$ log-softmax for the backward,
# which then makes two more tensors of that size.)
#
# </details>
#
# Look at which rows of $\bar z$ each output needs. Row $t$ of $\bar z$ depends only on row $t$ of $z$, that is
# on $h_t$ and $W$ — and on $n$, a count known before anything is computed. So the tokens can be processed a
# **chunk** at a time, in any order. That is Part B.
#
# ## Part B — chunked_linear_ce (3 points)
#
# Same inputs, same outputs as Part A, plus `chunk`, a number of tokens. Walk the tokens in chunks of
# `chunk` rows (the last one may be shorter, and `chunk` may exceed $T$): for each, form its logits and
# their gradient, use them, and let them go. The rule the check enforces: **at most `chunk` rows of logits
# at a time.** No tensor allocated inside your call may be larger than one chunk's logits plus the sizes of
# `h` and `W` — $\text{chunk} \cdot V + T d + V d$ elements, room for a chunk's $(c, V)$ tensors, for `dh` and
# for `dW` — checked at $T = 400$, $V = 257$, $d = 11$, chunks of 24 (`materialized-logits` otherwise: the full
# logits sliced afterwards, or a walk in two halves of $T$ that never looks at `chunk`, each refused with the
# tensor's size). Peak extra memory is then $O(\text{chunk} \cdot V + T d)$, whatever $T$.
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
# A chunk of rows $c$ needs $h_c$, all of $W$ and its targets. Does it need anything that only the whole batch
# knows? Look at Part A's weight per token: which number in it is counted over all $T$ tokens, and when can you
# count it? Then take Part A's steps on the chunk's rows alone: they give the chunk's share of the loss and its
# rows of $\bar z$. From those, which rows of $\bar h$ can the chunk fill, and which rows of $\bar W$?
#
# </details>
#
# <details><summary>Hint 2 — the mean across chunks</summary>
#
# The loss is one mean: $\frac{1}{n}\sum_t \ell_t$ over every counted token of every chunk. Take two chunks,
# one with 3 counted tokens and one with 1, and write the batch's loss from their $\ell_t$. Should a chunk add
# its own mean, or something else — and divided by which count: its own, the batch's $n$, or $T$ when some
# targets are `-100`? Ignored rows of a chunk get a zero row of $\bar z$, as in Part A.
#
# </details>
#
# <details><summary>Hint 3 — the walk's structure, and what must never exist</summary>
#
# $\bar h$'s rows belong to one chunk each; $\bar W$ is a sum over **all** tokens, since $W$ is read by every
# token: in notebook 01's words, the batch axis is summed. So the loop has this shape:
#
# ```python
# # before the loop: n, and the three outputs (dW starting at zero)
# for each chunk start s, in steps of `chunk` through the T tokens:
#     # the chunk's rows: a slice of h and of target, views, nothing copied
#     # its logits from h's slice alone, (c, V); its loss share and its rows of z̄, as in Part A
#     # its rows of dh: written into place
#     # its part of dW: ?
# ```
#
# Only the chunk's $(c, V)$ logits may exist: computing all $T \times V$ and slicing out a chunk builds them
# first, and so does any walk that takes more than `chunk` rows at once.
#
# </details>
# %% test id=test_chunked_linear_ce points=3
"""chunked_linear_ce: loss, dh and dW at batch 1, batch 7 with chunks that do
not divide T, V = d, ignore_index targets spread unevenly over the chunks,
transposed h and W, logits up to ±1000, against autograd; then at T = 400,
V = 257, chunks of 24, no tensor larger than one chunk's logits plus the
sizes of h and W; no autograd inside."""
course.selfcheck.chunked_linear_ce(chunked_linear_ce)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.chunked_linear_ce(chunked_linear_ce)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# For each chunk $c$ of rows, with $n$ counted once over all $T$ tokens:
#
# $$\bar z_c = (P_c - Y_c)/n, \qquad \bar h_c = \bar z_c W, \qquad \boxed{\;\bar W \mathrel{+}= \bar z_c^\top h_c\;}$$
#
# — in code `dh[rows] = dz @ W` and `dW += dz.T @ h[rows]`. Each chunk *owns* its rows of $\bar h$ and
# *contributes to* all of $\bar W$, notebook 01's law again (a value read by many outputs collects the gradient
# of all of them: $W$ is read by every token).
#
# </details>
#
# ### The walk of a fused linear cross-entropy
#
# The chunk's logits $z_c$ become its gradient $\bar z_c$ and are let go as the next chunk makes its own, so the
# V-wide tensors are chunk $\times V$, whatever $T$ is. This is Liger-Kernel's
# `LigerFusedLinearCrossEntropyLoss`: its Triton kernel computes the chunk's loss and writes $\bar z_c$ **over**
# $z_c$ in the same buffer, and the forward pass already returns $\bar h$ and $\bar W$ (the backward only scales
# them by the upstream gradient of the loss). That kernel walks each row of the chunk in vocabulary blocks with a
# running max and sum, the walk of §2 and Part C; so the vocabulary comes first, and Part D returns to this
# chunk to write Liger's kernel.
#
# How big is a chunk? This notebook takes 1024 tokens at Llama 3's sizes, so a chunk's logits are
# $1024 \times 128{,}256 \times 4$ bytes $= 0.53$ GB in float32 instead of 4.2 GB — our choice, for round
# numbers. Liger chooses its own: $\text{chunk} = \text{next\_pow2}\big(\lceil BT / \lceil V / H \rceil \rceil\big)$,
# with $BT$ the tokens and $H$ the hidden size, so that a chunk's logits are about as big as $h$ itself. At
# $BT = 8192$, $V = 128{,}256$, $H = 4096$: $\lceil V/H \rceil = 32$, $8192 / 32 = 256$ tokens, 0.13 GB a chunk.
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
# **blocks**, if it carries the right summary from one block to the next.
#
# **From notebook 05** (Part C, the online softmax): a row walked in blocks keeps its running max $m$ and its
# running sum $\ell = \sum_{\text{seen}} e^{z - m}$. For each block, with $m'$ the larger of $m$ and the block's
# own max, $\ell \leftarrow e^{m - m'}\,\ell + \sum_{\text{block}} e^{z - m'}$ and then $m \leftarrow m'$; after
# the last block the row's log-sum-exp is $m + \log \ell$. Start at $m = -\infty$, $\ell = 0$. That update is
# derived; what is new here is what a block of a *vocabulary* is, and what the walk holds.
#
# ## Part C — vocab_blocked_lse (2 points)
#
# - `h` $(T, d)$, `W` $(V, d)$, `block` $\ge 1$ a number of classes;
# - return `lse`, shape $(T,)$: $\log \sum_v e^{z_{t,v}}$ for each row of $z = h W^\top$;
# - walk the vocabulary in blocks of `block` classes (the last may be shorter, or `block` may exceed $V$),
#   computing only that block's logits for every token, $(T, \text{block})$, at each step;
# - the rule the check enforces: no tensor larger than one block's logits plus the sizes of `h` and `W`
#   ($T \cdot \text{block} + T d + V d$ elements; checked at $T = 301$, $V = 347$, blocks of 21:
#   `materialized-logits` otherwise), and logits of $\pm 1000$ must not overflow;
# - the combining is yours: torch's `logsumexp`, `logaddexp` and `softmax`/`log_softmax` (in any of their
#   forms) are refused inside the call (`delegated-to-library`) — notebook 05's update with `torch.maximum`,
#   `torch.exp`, sums and `torch.log` is all it takes.
#
# Two questions first. The logits of one block of classes, for every token: which rows or columns of which
# operand give them, without computing any other class's logit? And what does the walk hold from one block
# to the next, per token — so what is its largest tensor?
# %% solution id=vocab_blocked_lse
def vocab_blocked_lse(h, W, block):
    """(T,) log-sum-exp of each row of h Wᵀ, walking the vocabulary `block` classes at a time.

    h (T, d), W (V, d), block ≥ 1 → lse (T,). Holds (T, block) logits at a time, never (T, V).
    """
    ### BEGIN SOLUTION
    T, V = h.shape[0], W.shape[0]
    m = h.new_full((T,), float("-inf"))  # (T,) each row's running max: notebook 05's m
    ell = h.new_zeros(T)  # (T,) each row's running sum of exp(z − m): notebook 05's ℓ
    for j in range(0, V, block):
        zb = h @ W[j:j + block].T  # (T, b) this block's logits: write T·b
        m_new = torch.maximum(m, zb.amax(dim=-1))  # (T,)
        # Notebook 05's rescale: each earlier term exp(z − m) becomes exp(z − m_new).
        ell = ell * torch.exp(m - m_new) + torch.exp(zb - m_new[:, None]).sum(dim=-1)
        m = m_new
    return m + ell.log()
    ### END SOLUTION

# %% [markdown]
# <details><summary>Hint 1 — what a block of the vocabulary is</summary>
#
# Write one logit out: $z_{t,v} = \langle h_t, W_v \rangle$. Which index of $W$ is the class $v$, a row or a
# column? So which piece of $W$ do the classes $j, \dots, j + b - 1$ need, and what shape does its product with
# `h` have — every token's logits for just those classes? Check it on a toy head: its result should equal the
# columns $j, \dots, j + b - 1$ of the full logits.
#
# </details>
#
# <details><summary>Hint 2 — what is carried, per token</summary>
#
# Notebook 05 carried $m$ and $\ell$ for one row of scores; here every token is a row, so both are $(T,)$,
# made before the loop with the dtype of `h` (`new_full`, `new_zeros`). A block's own max per row is a reduction
# over its last axis. At the first block $m = -\infty$: check by hand that the rescale factor $e^{m - m'}$ is
# then 0 (not NaN), so that $\ell$ becomes exactly the first block's own sum.
#
# </details>
#
# <details><summary>Hint 3 — the loop, and what it holds</summary>
#
# ```python
# # m: (T,) at -inf; ell: (T,) at 0
# for each block start j, in steps of `block` through the V classes:
#     # zb: this block's logits, (T, b) — from a slice of W, never from all V classes
#     # m_new: the larger of m and zb's row max
#     # ell: notebook 05's rescale of the old sum, plus zb's own sum measured from m_new
#     # m becomes m_new
# # after the loop: notebook 05's last line
# ```
#
# Per step the walk holds one $(T, b)$ tile, its `exp` temporary and two $(T,)$ vectors — never a row of $V$.
# A library log-sum-exp of a block followed by `logaddexp` gives the same numbers, but then torch carries the
# max and the rescale for you; the check refuses it.
#
# </details>
# %% test id=test_vocab_blocked_lse points=2
"""vocab_blocked_lse: batch 1, batch 7, blocks that do not divide V, transposed
h and W, logits up to ±1000 (a running max that grows from block to block),
against torch.logsumexp; then at T = 301, V = 347 no tensor larger than one
block's logits plus the sizes of h and W, and no library log-sum-exp,
logaddexp or softmax inside the call."""
course.selfcheck.vocab_blocked_lse(vocab_blocked_lse)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.vocab_blocked_lse(vocab_blocked_lse)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What you just derived (open once your check passes)</summary>
#
# A block of the vocabulary is a block of **rows of $W$**: with $W_b$ the rows $j, \dots, j + b - 1$,
#
# $$\boxed{\;z_b = h\, W_b^\top\;} \quad (T, b),$$
#
# in code `h @ W[j:j + block].T`: every token's logits for those classes and no others. The walk carries
# notebook 05's $m$ and $\ell$, one of each per token, and after the last block
# $\operatorname{lse} = m + \log \ell$. It holds one $(T, b)$ tile (and its `exp`) and two $(T,)$ vectors:
# $O(T \cdot \text{block})$, with the block, not the vocabulary, as the second factor.
#
# </details>
#
# ### Cut Cross-Entropy, as it is built
#
# Your walk keeps all $T$ tokens in each step. Cut Cross-Entropy (Wijmans et al., 2024) puts the same
# reduction in one kernel and tiles in **two** dimensions, tokens × vocabulary: each program computes one tile
# of logits from a tile of $h$'s rows and a tile of $W$'s rows, in on-chip SRAM, and reduces it to one
# log-sum-exp per token; the tiles of one token's vocabulary are then combined into its $\operatorname{lse}$
# (the same combination as your running max and sum, done across programs). Only $\operatorname{lse}$ — one
# number per token — and the target logits $z_{t, y_t}$ (an indexed dot product) reach global memory.
#
# Its backward walks the same 2-D tiles: it recomputes each tile's logits, forms the tile's gradient from the
# saved $\operatorname{lse}$ (as notebook 05 recomputed $P$ from $L$), and **accumulates** across tiles: the
# tile's product with $W$'s rows into $\bar h$ (summed over the vocabulary tiles of those tokens), and its
# product with $h$'s rows into $\bar W$ (summed over the token tiles of those words). Two more ideas make it
# fast. *Gradient filtering*: most softmax entries of a row are too small to survive rounding in the precision
# the gradient is kept in (bf16), so a tile whose entries are all below that threshold is skipped. *Vocabulary
# sorting*: the vocabulary is reordered so that the words that do carry gradient share tiles, and more tiles
# can be skipped whole. No tensor of size $T \times V$, nor chunk $\times V$, ever exists: for Gemma 2 (2B) the
# loss's memory goes from 24 GB to about 1 MB.
# %% [markdown]
# ## Part D — ce_grad_kernel (2 points)
#
# Back to Part B's chunk. At its peak it held four $(c, V)$ tensors (§3 measures them): its logits $z_c$, a
# shifted copy ($z_c - m$, then $z_c - \operatorname{lse}$) and that copy's `exp`, and the previous chunk's
# $\bar z$, which its name keeps alive until the loop rebinds it. Liger-Kernel holds one. Its Triton kernel
# reads a row of the chunk's logits, computes the row's loss and then **writes the row's gradient over the
# logits themselves**, in the same buffer: once $\bar z_c$ is known, nobody needs $z_c$ again. Write that
# kernel. It is launched as
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
    ell = acc  # running sum of exp(z − m)
    for start in range(0, V, BLOCK_V):  # first walk: Part C's online log-sum-exp
        mask = start + cols < V
        z = tl.load(z_row + start + cols, mask=mask, other=float("-inf"))  # masked lanes add exp(−inf) = 0
        m_new = tl.maximum(m, tl.max(z, axis=0))
        ell = ell * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new), axis=0)
        m = m_new
    lse = m + tl.log(ell)
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
# <details><summary>Hint 3 — the masks, and where the sums are kept</summary>
#
# The last piece of a row is partly past $V$. In the first walk, what must a masked lane load so that it
# changes neither the running max nor the running sum (what is $e^{-\infty}$)? In the second, the lanes past
# $V$ load something harmless and the store must skip them: another row, or the padding, lies there. The
# running max and sum are 0-d values carried across the loop; keep them in float32 at least — float64 for
# float64 logits, float32 for half-precision ones, whose sum of $V$ terms would lose digits (a float32 zero
# added to a zero of the logits' dtype has the wider of the two types). The one-hot of a piece: compare the
# piece's column indices with the row's safe class under `tl.where`.
# If the check says `out-of-bounds`, it names the program, the line and the tensor beside which the access
# fell: was the lane past $V$ in the last piece, or was the row itself one the kernel should not touch?
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
# <details><summary>What you just derived (open once your check passes)</summary>
#
# One program per row reads the row, keeps two numbers (Part C's running max and sum), writes one loss
# $(\operatorname{lse} - z_y)/n$, then reads the row again and writes Part A's gradient **over** it:
#
# $$\boxed{\;\bar z = (P - Y)/n\;}$$
#
# one piece at a time, in code `g = (p - onehot) * scale`, with `scale` $1/n$ on a counted row and 0 on an
# ignored one, and masks that keep every load and store inside the row's
# $V$ values.
#
# </details>
#
# ### Liger's trick
#
# The chunk's logits and their gradient are one $(c, V)$ buffer: at this notebook's chunk of 1024 that is
# 0.53 GB, where Part B's chunk held four of that size. The chunk's matmuls then read the gradient from that
# same buffer, for the chunk's rows of $\bar h$ and its share of $\bar W$. Here is one chunk of Part B through the
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
# $T = 8192$, $V = 128{,}256$ in float32, with this notebook's chunks of 1024 and blocks of 4096 there (Liger's
# rule would pick chunks of 256, a quarter of each figure below for the chunked walk).
# %%
V_CPU, D_CPU, CHUNK, BLOCK = 2048, 64, 128, 256  # the measured head
CHUNK_GPU, BLOCK_GPU = 1024, 4096  # this notebook's sizes at Llama 3's scale (Liger's own rule gives chunks of 256)
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
# chunked walk holds four chunk-sized tensors whatever $T$ — the chunk's logits $z_c$, a shifted copy and its
# `exp` (for the log-sum-exp, then for the softmax that becomes $\bar z_c$), and the previous chunk's $\bar z$,
# which its name keeps alive until the loop rebinds it (a `del` at the end of the loop body makes it three) —
# about 2 GB at chunks of 1024, and a Triton kernel that writes $\bar z_c$ over $z_c$ needs one. What still
# grows with $T$ is $\bar h$, $(T, d)$, which has to exist anyway. The
# vocabulary-blocked reduction grows with $T$, but with the block, not the vocabulary, as the other factor:
# three $T \times \text{block}$ tensors, 0.4 GB at $T = 8192$, and less than that once the blocks live in SRAM.
#
# ## What to take away
#
# - The LM head's backward is notebooks 01 and 02 chained; what the head adds is **which tokens count** —
#   ignored targets leave the sum and the count — and **the layout**, $W$ stored $(V, d)$.
# - Row $t$ of $\bar z$ needs only row $t$ of $z$ and the batch's count, so the tokens can be walked in chunks:
#   each chunk owns its rows of $\bar h$, and every chunk contributes to $\bar W$. The largest tensor is then
#   one chunk's logits, $O(\text{chunk} \cdot V + T d)$ instead of $O(T V)$ — Liger-Kernel's fused linear
#   cross-entropy, whose chunk is its own choice of memory against matmul size.
# - The log-sum-exp is notebook 05's online reduction, so the vocabulary can be walked too, in
#   $O(T \cdot \text{block})$; tiled over tokens and vocabulary at once, with the backward recomputing each tile from
#   the saved $\operatorname{lse}$, Cut Cross-Entropy never holds a row of logits at all.
# - Same FLOPs, a few GB less: when memory is the limit, walking beats holding.
