# %% [markdown]
# # 05 · Attention backward: keep P, or rebuild it
#
# Attention's forward builds a $T \times T$ matrix of probabilities $P$ for every head, uses it
# once to mix the values, and is done with it. The backward needs $P$ again. So a backward
# author faces the decision that notebook 02 only hinted at: **save** $P$ (simple, and $T^2$
# numbers per head sitting in memory until the backward runs), or save **one number per row**
# and **rebuild** $P$ from it, tile by tile, when the backward needs it. The second is what
# FlashAttention does, and it is why long-context training fits in memory at all.
#
# This notebook writes both, by hand:
#
# 1. attention with a hand-written backward that **saves $P$** — two matmuls and one softmax, each
#    turned into its VJP;
# 2. the identity $\operatorname{rowsum}(\bar P \odot P) = \operatorname{rowsum}(\bar O \odot O)$, which
#    gets the softmax's row scalar without touching $P$;
# 3. the forward that saves only $L = m + \log \ell$ per row, and $P = e^{S - L}$ rebuilt from it;
# 4. a **blockwise backward** that walks tiles of keys and queries and never allocates anything $T \times T$;
# 5. the trade-off in numbers: bytes moved against FLOPs at $N = 4096$, and measured peak memory;
# 6. the same backward in **Triton**: you write the kernel that computes the row scalar, then run a
#    whole FlashAttention forward and backward in Triton on top of it.
#
# | part | you write | points |
# |---|---|---|
# | A | `ManualAttention` — a `torch.autograd.Function` whose backward uses the saved $P$ | 3 |
# | B | `manual_attention(q, k, v)` — attention through `ManualAttention` | 1 |
# | C | `attention_forward_lse(q, k, v) -> (o, lse)` — blockwise, online softmax | 2 |
# | D | `attention_backward_recompute(q, k, v, o, lse, do) -> (dq, dk, dv)` — blockwise, $P$ rebuilt | 3 |
# | E | `RecomputeAttention` — saves $q, k, v, o$ and lse, nothing $T \times T$ | 2 |
# | F | `recompute_attention(q, k, v)` — attention through `RecomputeAttention` | 1 |
# | G | `attention_delta_kernel` — `@triton.jit`: $D = \operatorname{rowsum}(\bar O \odot O)$, a block of rows per program | 2 |
#
# **Notation.** `q`, `k`, `v` have shape $(B, T, d)$: batch (think batch × heads), tokens, head
# dim. The head dim is a lowercase $d$ here, because capital $D$ names a row scalar from §3 on.
# $c = 1/\sqrt d$ is the score scale, and $\bar t$ (in code `dt`) is the gradient of the loss with
# respect to $t$, with the shape of $t$.
#
# Each part ends with a test cell that prints `✓ ...` when your code is right; when it is wrong,
# its first line names the kind of bug (`diagnosis: scale — ...`) and the next lines say where.
# %%
import course

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from course.peak_memory import backward_peak

F64 = torch.float64  # the checks in this notebook run in float64


def randn(gen, *shape, dtype=F64):
    """Standard-normal values of the given shape, drawn from the generator `gen`."""
    return torch.randn(shape, generator=gen, dtype=dtype)


# %% [markdown]
# ## 1 · The forward, and the matrix it leaves behind
#
# For one head, with queries $Q$, keys $K$ and values $V$, each $T \times d$:
#
# $$S = c\,QK^\top \;(T \times T), \qquad P = \operatorname{softmax}(S)\ \text{row by row}\;(T \times T), \qquad O = PV \;(T \times d).$$
#
# Row $i$ of $P$ says how much query $i$ attends to each key; it sums to 1. Written one PyTorch
# op at a time, with what each line moves through memory:
# %%
def naive_attention(q, k, v):
    """softmax(c·q kᵀ) v for q, k, v of shape (B, T, d), one PyTorch op at a time."""
    B, T, d = q.shape  # batch (× heads), tokens, head dim
    c = 1 / math.sqrt(d)
    S = c * (q @ k.mT)  # (B, T, T): read 2BTd, write BT²
    P = torch.softmax(S, dim=-1)  # (B, T, T): read BT², write BT²
    return P @ v  # (B, T, d): read BT² + BTd, write BTd

# %% [markdown]
# It agrees with PyTorch's fused `scaled_dot_product_attention`, which is the reference for every
# check in this notebook. And the $T \times T$ tensors are what make it expensive: one head of
# one sequence, in float32, at a few lengths:
# %% check-output
gen = torch.Generator().manual_seed(0)
q, k, v = (randn(gen, 2, 10, 4) for _ in range(3))  # (B, T, d)
print("naive_attention == scaled_dot_product_attention:",
      torch.allclose(naive_attention(q, k, v), F.scaled_dot_product_attention(q, k, v)))

for T in (1024, 4096, 32768):
    print(f"T = {T:6}: P holds {T * T:>13,} numbers = {4 * T * T / 2**20:6.0f} MiB;"
          f" Q, K, V and O together {4 * T * 128:>10,} (d = 128)")

# %% [markdown]
# At $T = 32768$ one head's $P$ is 4 GiB. A model with 32 heads and a batch of 8 would need a
# terabyte — for one layer — to keep them all until the backward. Hold on to that number.
#
# ## 2 · The backward, one op at a time
#
# The backward receives $\bar O$, shaped like $O$, and must return $\bar Q, \bar K, \bar V$,
# shaped like $Q, K, V$. Walk the forward in reverse, one VJP per op.
#
# **$O = PV$ is a matmul.** Notebook 01's rule: the gradient of each factor is $\bar O$ multiplied
# by the *other* factor, transposed, on the side that makes the shapes agree.
#
# $$\bar V = P^\top \bar O \quad (T \times T)(T \times d) \to (T \times d), \qquad
# \bar P = \bar O\, V^\top \quad (T \times d)(d \times T) \to (T \times T).$$
#
# **$P = \operatorname{softmax}(S)$ acts on each row separately.** Notebook 02's collapse, row by
# row: with $s_i = \sum_j \bar P_{ij} P_{ij}$, one scalar per query row,
#
# $$\bar S_{ij} = P_{ij}\,(\bar P_{ij} - s_i), \qquad \text{i.e.}\quad
# \bar S = P \odot \big(\bar P - \operatorname{rowsum}(\bar P \odot P)\big),$$
#
# where the row sum is a $T \times 1$ column, subtracted from every entry of its row (in
# PyTorch: `keepdim=True`).
#
# **$S = c\,QK^\top$ is a matmul again**, with a constant in front:
#
# $$\bar Q = c\,\bar S K \quad (T \times T)(T \times d) \to (T \times d), \qquad
# \bar K = c\,\bar S^\top Q \quad (T \times T)^\top (T \times d) \to (T \times d).$$
#
# | forward | backward | kind |
# |---|---|---|
# | $O = PV$ | $\bar V = P^\top \bar O$, $\ \bar P = \bar O V^\top$ | matmul: two products |
# | $P = \operatorname{softmax}(S)$ | $\bar S = P \odot (\bar P - \operatorname{rowsum}(\bar P \odot P))$ | the one non-matmul step |
# | $S = c\,QK^\top$ | $\bar Q = c\,\bar S K$, $\ \bar K = c\,\bar S^\top Q$ | matmul: two products |
#
# Every matmul of the forward contributes its own pair of products to the backward: four
# matmuls, each as large as one of the forward's two. The constant $c$ rides along into both
# $\bar Q$ and $\bar K$; forgetting it there is the classic attention-backward bug (the answer is
# off by exactly $\sqrt d$).
#
# **What the backward reads:** $Q$, $K$, $V$ for the matmul gradients, $\bar O$, and $P$ for $\bar V$
# and $\bar S$. Not $S$: $P$ is what both formulas use, so the forward saves $P$.
#
# ## Part A — ManualAttention (3 points)
#
# Write attention as a `torch.autograd.Function` with both passes by hand:
#
# - `forward(ctx, q, k, v)` computes $S$, $P$ and $O$ for `q`, `k`, `v` of shape $(B, T, d)$, saves
#   `q, k, v, P` with `ctx.save_for_backward`, and returns `O`;
# - `backward(ctx, do)` receives $\bar O$ and returns `(dq, dk, dv)`, in the order forward received
#   `q, k, v`, each shaped like its input. It must not call autograd: the checks stop any call into it.
#
# Use `.mT` (the transpose of the last two axes) for every transpose, so the batch axis stays put,
# and the names of the derivation: `S`, `P`, `dP`, `dS`. `torch.softmax` is fine in the forward.
# %% solution id=ManualAttention
class ManualAttention(torch.autograd.Function):
    """softmax(c·q kᵀ) v for q, k, v of shape (B, T, d), with a hand-written backward that reads the saved P."""

    @staticmethod
    def forward(ctx, q, k, v):
        ### BEGIN SOLUTION
        B, T, d = q.shape  # batch, tokens, head dim
        c = 1 / math.sqrt(d)
        S = c * (q @ k.mT)  # (B, T, T) scores
        P = torch.softmax(S, dim=-1)  # (B, T, T): every row sums to 1
        O = P @ v  # (B, T, d)
        ctx.save_for_backward(q, k, v, P)  # P is T×T per head: this is the memory the notebook is about
        return O
        ### END SOLUTION

    @staticmethod
    def backward(ctx, do):
        ### BEGIN SOLUTION
        q, k, v, P = ctx.saved_tensors
        c = 1 / math.sqrt(q.shape[-1])
        dv = P.mT @ do  # (B, T, T) @ (B, T, d) -> (B, T, d): O = PV, gradient of the right factor
        dP = do @ v.mT  # (B, T, d) @ (B, d, T) -> (B, T, T): and of the left factor
        dS = P * (dP - (dP * P).sum(dim=-1, keepdim=True))  # (B, T, T): softmax, row by row
        dq = c * (dS @ k)  # (B, T, T) @ (B, T, d) -> (B, T, d)
        dk = c * (dS.mT @ q)  # (B, T, T)ᵀ @ (B, T, d) -> (B, T, d)
        return dq, dk, dv
        ### END SOLUTION

# %% test id=test_ManualAttention points=3
"""ManualAttention: o, dq, dk, dv against scaled_dot_product_attention and its autograd for an explicit ō, at batch 1 and 7 with T ≠ d; no autograd inside backward."""
course.selfcheck.ManualAttention(ManualAttention)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.ManualAttention(ManualAttention)
### END HIDDEN TESTS

# %% [markdown]
# ## Part B — manual_attention (1 point)
#
# The function users call: attention of `q`, `k`, `v` of shape $(B, T, d)$ through
# `ManualAttention.apply`, so that autograd runs your backward. (`Function`s are called through
# `.apply`, never by instantiating them.)
# %% solution id=manual_attention
def manual_attention(q, k, v):
    """softmax(q kᵀ/√d) v for q, k, v of shape (B, T, d), differentiable through ManualAttention."""
    ### BEGIN SOLUTION
    return ManualAttention.apply(q, k, v)
    ### END SOLUTION

# %% test id=test_manual_attention points=1
"""manual_attention: o and the three gradients against scaled_dot_product_attention at batch 1 and 7, run through ManualAttention."""
course.selfcheck.manual_attention(manual_attention)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.manual_attention(manual_attention)
### END HIDDEN TESTS

# %% [markdown]
# An independent check of the whole thing: `torch.autograd.gradcheck` perturbs every entry of
# `q`, `k` and `v` by ±ε, runs *your forward* twice per entry, and compares the difference
# quotients with what *your backward* returns. It says the backward is the derivative of the
# forward, whatever the forward computes; the test cells above say the forward is attention.
# %%
try:
    gen = torch.Generator().manual_seed(1)
    q, k, v = (randn(gen, 2, 6, 3).requires_grad_(True) for _ in range(3))  # (B, T, d), float64
    print("gradcheck of manual_attention (float64):", torch.autograd.gradcheck(manual_attention, (q, k, v)))
except NotImplementedError:
    print("Finish Parts A and B first: this cell runs manual_attention.")

# %% [markdown]
# ## 3 · The row scalar without P
#
# The softmax step needs one scalar per query row, $D_i = \sum_j \bar P_{ij} P_{ij}$. As written it
# takes a whole row of $P$ and of $\bar P$ — $T$ products per row. But substitute
# $\bar P = \bar O V^\top$, that is $\bar P_{ij} = \sum_e \bar O_{ie} V_{je}$, and swap the order of
# the two sums:
#
# $$D_i \;=\; \sum_j \Big(\sum_e \bar O_{ie} V_{je}\Big) P_{ij}
# \;=\; \sum_e \bar O_{ie} \underbrace{\sum_j P_{ij} V_{je}}_{O_{ie}}
# \;=\; \sum_e \bar O_{ie}\, O_{ie}.$$
#
# The inner sum is row $i$ of $O = PV$ — the forward's own output. So
#
# $$\boxed{\;D = \operatorname{rowsum}(\bar P \odot P) = \operatorname{rowsum}(\bar O \odot O)\;}
# \qquad\text{and}\qquad \bar S = P \odot (\bar P - D).$$
#
# The right-hand side costs $d$ products per row instead of $T$, and it needs only $O$ (saved by the
# forward, $T \times d$) and $\bar O$ (handed to the backward, $T \times d$). $D$ can be computed
# **first**, for all rows, before a single entry of $P$ exists. Numerically:
# %% check-output
gen = torch.Generator().manual_seed(3)
B, T, d = 2, 50, 12  # batch, tokens, head dim
q, k, v, do = (randn(gen, B, T, d) for _ in range(4))  # do is Ō, shaped like O
P = torch.softmax(q @ k.mT / math.sqrt(d), dim=-1)  # (B, T, T)
o = P @ v  # (B, T, d)

from_P = ((do @ v.mT) * P).sum(dim=-1)  # (B, T): T products per row, and it needs P
D = (do * o).sum(dim=-1)  # (B, T): d products per row, from O and Ō alone
print("rowsum(P̄ ⊙ P) == rowsum(Ō ⊙ O):", torch.allclose(from_P, D, rtol=1e-12, atol=1e-12))
print(f"products per row: {T} through P, {d} through O")

# %% [markdown]
# ## 4 · One number per row: $L = m + \log \ell$
#
# With $D$ in hand, the backward still needs $P$ itself, for $\bar V = P^\top \bar O$ and for
# $\bar S = P \odot (\bar P - D)$. Here is how to get it back from $T$ numbers instead of $T^2$.
# The stable softmax of row $i$ uses the row max $m_i = \max_j S_{ij}$ and the row sum
# $\ell_i = \sum_j e^{S_{ij} - m_i}$:
#
# $$P_{ij} = \frac{e^{S_{ij} - m_i}}{\ell_i} = e^{S_{ij} - m_i - \log \ell_i} = e^{S_{ij} - L_i},
# \qquad L_i = m_i + \log \ell_i = \log \sum_j e^{S_{ij}}.$$
#
# $L_i$ is the row's log-sum-exp, `lse` in code. Save $L$ — one number per query row — and any
# entry of $P$ can be rebuilt from its score: recompute the tile of $S$ from a block of $Q$ and a
# block of $K$, subtract the $L$ of its rows, exponentiate. The exponent $S_{ij} - L_i$ is never
# positive ($L_i \ge m_i \ge S_{ij}$), so nothing overflows, and the result is $P$ up to rounding:
# %%
S = q @ k.mT / math.sqrt(d)  # (B, T, T), the scores of §3
L = torch.logsumexp(S, dim=-1)  # (B, T): one number per row
rebuilt = torch.exp(S - L[..., None])  # (B, T, T): any tile of it needs only its rows' L
print("exp(S − L) == softmax(S):", torch.allclose(rebuilt, P, rtol=1e-13, atol=1e-15))
print(f"to save: P holds {P[0].numel():,} numbers per head, L holds {L[0].numel()}")

# %% [markdown]
# **Computing $L$ without a whole row of $S$.** The forward must produce $O$ and $L$ one tile of
# $S$ at a time, or it would hold $T \times T$ scores after all. The *online softmax* does it. Walk
# the keys in blocks, and keep three running values per query row: the max so far $m$, the sum so
# far $\ell = \sum e^{S - m}$, and the unnormalised output so far $A = \sum_j e^{S_{ij} - m} V_j$.
# When a new block of scores $S_{\text{blk}}$ arrives:
#
# $$m' = \max\big(m, \max S_{\text{blk}}\big), \qquad \alpha = e^{m - m'}, \qquad
# \ell \leftarrow \alpha\,\ell + \textstyle\sum e^{S_{\text{blk}} - m'}, \qquad
# A \leftarrow \alpha A + e^{S_{\text{blk}} - m'}\, V_{\text{blk}}, \qquad m \leftarrow m'.$$
#
# $\alpha \le 1$ re-expresses what was summed under the old max in terms of the new one (it is 1
# when the max did not move). Start from $m = -\infty$, $\ell = 0$, $A = 0$; after the last block,
# $O = A / \ell$ and $L = m + \log \ell$. One row of 12 scores, in blocks of 4:
# %%
scores = torch.tensor([0.3, -1.2, 2.0, 0.7, 4.1, -0.5, 1.1, 3.9, -2.2, 0.0, 5.3, 1.4], dtype=F64)
m_run, ell_run = torch.tensor(-math.inf, dtype=F64), torch.tensor(0.0, dtype=F64)
for start in range(0, 12, 4):
    block = scores[start:start + 4]
    m_next = torch.maximum(m_run, block.max())
    ell_run = torch.exp(m_run - m_next) * ell_run + torch.exp(block - m_next).sum()  # rescale, then add
    m_run = m_next
    print(f"after keys {start:2}–{start + 3:2}:  m = {m_run.item():.2f}   ℓ = {ell_run.item():.4f}")
print(f"m + log ℓ = {(m_run + torch.log(ell_run)).item():.6f};  logsumexp = {torch.logsumexp(scores, 0).item():.6f}")

# %% [markdown]
# ## Part C — attention_forward_lse (2 points)
#
# Return `(o, lse)` for `q`, `k`, `v` of shape $(B, T, d)$: `o` $(B, T, d)$ the attention output and
# `lse` $(B, T)$ the $L$ of every query row. Work **blockwise**:
#
# - for each block of `BLOCK_Q` queries, walk the keys in blocks of `BLOCK_K` with the online
#   softmax above: running `m`, `ell` (for ℓ) and `acc` (for $A$), and one tile of `S` at a time, of
#   shape (B, at most `BLOCK_Q`, at most `BLOCK_K`);
# - $T$ need not be a multiple of the block: a slice such as `k[:, j:j + BLOCK_K]` simply stops at $T$;
# - **allocate nothing $T \times T$**. The test cell runs your function at $T = 256$ and refuses any
#   tensor of $T^2$ elements or more, even when the values are right.
#
# `torch.exp`, `torch.maximum`, `torch.log` and matmuls are all you need; `new_full`, `new_zeros` and
# `zeros_like` make tensors with the dtype of an existing one.
# %% solution id=attention_forward_lse
BLOCK_Q = 64  # queries per tile
BLOCK_K = 64  # keys per tile


def attention_forward_lse(q, k, v):
    """o = softmax(c·q kᵀ) v and lse = L = m + log ℓ per query row, one (BLOCK_Q × BLOCK_K) tile of S at a time.

    q, k, v: (B, T, d). Returns o (B, T, d) and lse (B, T). Nothing T×T is allocated.
    """
    ### BEGIN SOLUTION
    B, T, d = q.shape  # batch, tokens, head dim
    c = 1 / math.sqrt(d)
    o = torch.empty_like(q)  # (B, T, d), filled one block of queries at a time
    lse = q.new_empty(B, T)  # (B, T): all the forward keeps for the backward, besides o
    for i in range(0, T, BLOCK_Q):
        qi = q[:, i:i + BLOCK_Q]  # (B, Tq, d), Tq ≤ BLOCK_Q: a view, not a copy
        m = qi.new_full(qi.shape[:2], -math.inf)  # (B, Tq) running row max
        ell = qi.new_zeros(qi.shape[:2])  # (B, Tq) running Σ exp(S − m)
        acc = torch.zeros_like(qi)  # (B, Tq, d) running Σ exp(S − m) v
        for j in range(0, T, BLOCK_K):
            S = c * (qi @ k[:, j:j + BLOCK_K].mT)  # (B, Tq, Tk): one tile of S, never all of it
            m_new = torch.maximum(m, S.amax(dim=-1))  # (B, Tq)
            alpha = torch.exp(m - m_new)  # (B, Tq): restates the old sums under the new max
            p = torch.exp(S - m_new[..., None])  # (B, Tq, Tk), not yet divided by ℓ
            ell = alpha * ell + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ v[:, j:j + BLOCK_K]
            m = m_new
        o[:, i:i + BLOCK_Q] = acc / ell[..., None]
        lse[:, i:i + BLOCK_Q] = m + torch.log(ell)
    return o, lse
    ### END SOLUTION

# %% test id=test_attention_forward_lse points=2
"""attention_forward_lse: o against scaled_dot_product_attention and lse against torch.logsumexp of the scores, at batch 1 and 7 with T not a multiple of the block; nothing T×T allocated at T = 256."""
course.selfcheck.attention_forward_lse(attention_forward_lse)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.attention_forward_lse(attention_forward_lse)
### END HIDDEN TESTS

# %% [markdown]
# ## 5 · The backward, tile by tile
#
# Everything the backward needs now comes in blocks. For a block $i$ of query rows and a block $j$
# of keys, the tile of the backward needs $Q_i$, $\bar O_i$, $L_i$, $D_i$ (per query row) and
# $K_j$, $V_j$ (per key), and nothing else:
#
# $$S_{ij} = c\,Q_i K_j^\top, \quad P_{ij} = e^{S_{ij} - L_i}, \quad
# \bar V_j \mathrel{+}= P_{ij}^\top \bar O_i, \quad \bar P_{ij} = \bar O_i V_j^\top, \quad
# \bar S_{ij} = P_{ij} \odot (\bar P_{ij} - D_i),$$
#
# $$\bar Q_i \mathrel{+}= c\,\bar S_{ij} K_j, \qquad \bar K_j \mathrel{+}= c\,\bar S_{ij}^\top Q_i .$$
#
# The sums are the matmuls of §2 cut into pieces: $\bar V_j$ collects $P^\top \bar O$ over every
# query block, $\bar Q_i$ collects $\bar S K$ over every key block. Which sum to finish first is the
# loop order, and FlashAttention-2 picks **keys outside, queries inside**:
#
# ```
# D = rowsum(Ō ⊙ O)                           # before any tile, §3
# for each key block j:                        # on a GPU: one program per key block
#     dK_j = dV_j = 0                          # local: finished when the inner loop ends
#     for each query block i:
#         rebuild P_ij; dV_j += …; dK_j += …; dQ_i += …
#     write dK_j, dV_j
# ```
#
# $\bar K_j$ and $\bar V_j$ stay local to their key block and are written once. $\bar Q_i$ receives a
# contribution from every key block, so it lives in a $(B, T, d)$ buffer that each key block adds
# into. The biggest things alive are $(B, T, d)$ tensors, $(B, T)$ vectors ($L$, $D$) and one
# $(B, \text{BLOCK\_Q}, \text{BLOCK\_K})$ tile: memory $O(T)$ for a fixed block size, not $O(T^2)$.
# The order the tiles are visited in, for a $T$ of 6 blocks:
# %%
n_blocks = 6
order = torch.arange(n_blocks * n_blocks).reshape(n_blocks, n_blocks).T  # order[i, j]: key block j outside
fig, ax = plt.subplots(figsize=(4.2, 3.6))
ax.imshow(order, cmap="Blues")
for i in range(n_blocks):
    for j in range(n_blocks):
        ax.text(j, i, int(order[i, j]), ha="center", va="center", fontsize=8)
ax.set(xlabel="key block j (outer loop: dK_j, dV_j finished per column)",
       ylabel="query block i (dQ_i: one addition per column)", title="visit order of the tiles of S")
plt.show()

# %% [markdown]
# ## Part D — attention_backward_recompute (3 points)
#
# Return `(dq, dk, dv)`, each $(B, T, d)$, from the inputs `q`, `k`, `v`, the saved `o` and `lse`, and
# the upstream gradient `do` — **blockwise**, the loop above:
#
# - compute `D` $(B, T)$ first, from `do` and `o` (§3);
# - outer loop over key blocks of `BLOCK_K`, inner loop over query blocks of `BLOCK_Q`; rebuild each
#   tile `P` from its scores and its rows' `lse`; accumulate `dk`, `dv` for the key block and add into
#   `dq` for the query block (`dq[:, i:i + BLOCK_Q] += ...` adds into a slice in place);
# - don't forget $c$ in `dq` and `dk`;
# - **allocate nothing $T \times T$**: the check runs at $T = 256$, as in Part C. No autograd either.
# %% solution id=attention_backward_recompute
def attention_backward_recompute(q, k, v, o, lse, do):
    """dq, dk, dv of o = softmax(c·q kᵀ) v from the saved o and lse, rebuilding P one tile at a time.

    q, k, v, o, do: (B, T, d); lse: (B, T). Returns (dq, dk, dv), each (B, T, d). Nothing T×T is allocated.
    """
    ### BEGIN SOLUTION
    B, T, d = q.shape  # batch, tokens, head dim
    c = 1 / math.sqrt(d)
    D = (do * o).sum(dim=-1)  # (B, T): rowsum(dP ⊙ P), before a single tile of P exists
    dq = torch.zeros_like(q)  # (B, T, d): every key block adds into it
    dk = torch.empty_like(k)  # (B, T, d)
    dv = torch.empty_like(v)  # (B, T, d)
    for j in range(0, T, BLOCK_K):
        kj, vj = k[:, j:j + BLOCK_K], v[:, j:j + BLOCK_K]  # (B, Tk, d) views
        dkj = torch.zeros_like(kj)  # (B, Tk, d): local until every query block has added to it
        dvj = torch.zeros_like(vj)  # (B, Tk, d)
        for i in range(0, T, BLOCK_Q):
            qi, doi = q[:, i:i + BLOCK_Q], do[:, i:i + BLOCK_Q]  # (B, Tq, d) views
            # Rebuild the tile of P from one number per row instead of reading a T×T P back.
            P = torch.exp(c * (qi @ kj.mT) - lse[:, i:i + BLOCK_Q, None])  # (B, Tq, Tk)
            dvj += P.mT @ doi  # (B, Tk, Tq) @ (B, Tq, d)
            dP = doi @ vj.mT  # (B, Tq, Tk)
            dS = P * (dP - D[:, i:i + BLOCK_Q, None])  # (B, Tq, Tk)
            dq[:, i:i + BLOCK_Q] += c * (dS @ kj)  # (B, Tq, d)
            dkj += c * (dS.mT @ qi)  # (B, Tk, d)
        dk[:, j:j + BLOCK_K] = dkj
        dv[:, j:j + BLOCK_K] = dvj
    return dq, dk, dv
    ### END SOLUTION

# %% test id=test_attention_backward_recompute points=3
"""attention_backward_recompute: dq, dk, dv against the autograd of scaled_dot_product_attention for an explicit ō, at batch 1 and 7 with T not a multiple of the block; no autograd; nothing T×T allocated at T = 256."""
course.selfcheck.attention_backward_recompute(attention_backward_recompute)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.attention_backward_recompute(attention_backward_recompute)
### END HIDDEN TESTS

# %% [markdown]
# ## Part E — RecomputeAttention (2 points)
#
# Wire Parts C and D into autograd:
#
# - `forward(ctx, q, k, v)` runs `attention_forward_lse`, saves `q, k, v, o, lse` with
#   `ctx.save_for_backward` — and nothing else: nothing $T \times T$, neither saved nor kept on `ctx` —
#   and returns `o`;
# - `backward(ctx, do)` runs `attention_backward_recompute` and returns `(dq, dk, dv)`.
#
# The test cell records every tensor your forward saves, and every tensor your backward allocates
# while it runs, at $T = 256$.
# %% solution id=RecomputeAttention
class RecomputeAttention(torch.autograd.Function):
    """softmax(c·q kᵀ) v for q, k, v of shape (B, T, d) that saves o and lse (O(T)) and rebuilds P in the backward."""

    @staticmethod
    def forward(ctx, q, k, v):
        ### BEGIN SOLUTION
        o, lse = attention_forward_lse(q, k, v)
        ctx.save_for_backward(q, k, v, o, lse)  # four (B, T, d) and one (B, T): nothing T×T
        return o
        ### END SOLUTION

    @staticmethod
    def backward(ctx, do):
        ### BEGIN SOLUTION
        q, k, v, o, lse = ctx.saved_tensors
        return attention_backward_recompute(q, k, v, o, lse, do)
        ### END SOLUTION

# %% test id=test_RecomputeAttention points=2
"""RecomputeAttention: o, dq, dk, dv against scaled_dot_product_attention at batch 1 and 7; saves q, k, v, o, lse and nothing T×T; its backward allocates nothing T×T at T = 256 and calls no autograd."""
course.selfcheck.RecomputeAttention(RecomputeAttention)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.RecomputeAttention(RecomputeAttention)
### END HIDDEN TESTS

# %% [markdown]
# ## Part F — recompute_attention (1 point)
#
# As in Part B: attention of `q`, `k`, `v` $(B, T, d)$ through `RecomputeAttention.apply`.
# %% solution id=recompute_attention
def recompute_attention(q, k, v):
    """softmax(q kᵀ/√d) v for q, k, v of shape (B, T, d), differentiable through RecomputeAttention."""
    ### BEGIN SOLUTION
    return RecomputeAttention.apply(q, k, v)
    ### END SOLUTION

# %% test id=test_recompute_attention points=1
"""recompute_attention: o and the three gradients against scaled_dot_product_attention at batch 1 and 7, run through RecomputeAttention; nothing T×T saved or allocated at T = 256."""
course.selfcheck.recompute_attention(recompute_attention)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.recompute_attention(recompute_attention)
### END HIDDEN TESTS

# %% [markdown]
# ## 6 · The trade-off in numbers
#
# ### Bytes against FLOPs, at N = 4096
#
# Count what each backward moves through GPU memory (HBM) and what it computes, for one head with
# $N = 4096$ tokens and $d = 64$, in bf16 (2 bytes), the way §1 counted the forward.
#
# - **Save $P$** runs the formulas of §2 as separate kernels, like PyTorch's eager mode. Each
#   $N \times N$ operand goes through HBM: $P$ is read back, $\bar P$ and $\bar S$ are written and read
#   again. (The forward's write of $P$ is not even counted.)
# - **Recompute** runs the loop of §5 as one kernel. The $N \times N$ tiles live in on-chip memory and
#   never reach HBM; what moves is $O(Nd)$: $K, V$ once, and for each of the $N/B_c$ key blocks the
#   query-side rows $Q, \bar O, L, D$ again, and $\bar Q$ read and written back. It does one extra
#   matmul, rebuilding $S$, plus an exp per entry.
# %% check-output
N, d, BYTES = 4096, 64, 2  # tokens, head dim, bytes per bf16 element
Bc = 128  # keys per block of the recompute kernel (a typical GPU tile)


def backward_cost(strategy, N=N, d=d):
    """(elements moved through HBM, FLOPs) of one head's attention backward."""
    matmul = 2 * N * N * d  # one N×N×d product: a multiply and an add per term
    if strategy == "save P":  # one kernel per formula of §2
        moved = N * N + 2 * N * d  # dV = Pᵀ dO: read P and dO, write dV
        moved += 2 * N * d + N * N  # dP = dO Vᵀ: read dO and V, write dP
        moved += 2 * N * N + N * N  # dS = P ⊙ (dP − rowsum(dP ⊙ P)): read P and dP, write dS
        moved += 2 * (N * N + 2 * N * d)  # dQ = c dS K, dK = c dSᵀ Q: read dS and K (Q), write dQ (dK)
        flops = 4 * matmul + 4 * N * N  # four products; the softmax step is ~4 operations per entry
    else:  # "recompute"
        moved = 2 * N * d + N  # D = rowsum(dO ⊙ O): read O, dO; write D
        moved += 2 * N * d  # read K, V once
        moved += (N // Bc) * (2 * N * d + 2 * N + 2 * N * d)  # per key block: read Q, dO, L, D; read + write dQ
        moved += 2 * N * d  # write dK, dV
        flops = 5 * matmul + 5 * N * N  # S rebuilt, plus the four; exp(S − L) and the softmax step per entry
    return moved, flops


HBM = 3.35e12  # bytes/s, H100 SXM
PEAK = 989e12  # FLOP/s, H100 SXM bf16 tensor cores, dense
costs = {s: backward_cost(s) for s in ("save P", "recompute")}
for s, (moved, flops) in costs.items():
    t_bytes, t_flops = BYTES * moved / HBM * 1e6, flops / PEAK * 1e6  # µs
    print(f"{s:9}: {BYTES * moved / 2**20:6.1f} MiB moved ({t_bytes:5.1f} µs), "
          f"{flops / 1e9:5.2f} GFLOP ({t_flops:5.2f} µs) -> at least {max(t_bytes, t_flops):5.1f} µs")

# %% [markdown]
# The same numbers as a picture: for each backward, the time its bytes need at full bandwidth and
# the time its FLOPs need at full tensor-core speed. A kernel takes at least the longer of the two.
# %%
fig, ax = plt.subplots(figsize=(6.4, 3.6))
names = list(costs)
for offset, (label, per) in enumerate([("bytes / bandwidth", lambda m, f: BYTES * m / HBM * 1e6),
                                       ("FLOPs / peak", lambda m, f: f / PEAK * 1e6)]):
    heights = [per(*costs[s]) for s in names]
    bars = ax.bar([i + 0.38 * offset for i in range(len(names))], heights, width=0.36, label=label)
    ax.bar_label(bars, fmt="%.1f µs", fontsize=8)
ax.set_xticks([i + 0.19 for i in range(len(names))], names)
ax.set(ylabel="lower bound on time (µs)", title=f"attention backward, one head, N = {N}, d = {d}, bf16, H100")
ax.legend()
plt.show()

# %% [markdown]
# Recompute does **more** arithmetic — one more $N \times N \times d$ product — and still finishes
# several times sooner, because neither backward was ever limited by arithmetic: saving $P$ makes
# the backward wait on $N^2$-sized round trips to HBM while the tensor cores idle. (Real kernels do
# better than this count on both sides — caches catch some re-reads — but the gap is the point.)
# The general rule: **recompute what is large and cheap to rebuild from data already on chip; save
# what is small** — one number per row, like $L$.
#
# ### Measured: peak memory of the two backwards
#
# Now your two implementations, on this CPU. `backward_peak` (from `course.peak_memory`) adds up
# what the forward saved for the backward (beyond `q`, `k`, `v`, which exist anyway) and the most
# memory the backward's own tensors held at any one moment, tracking every tensor torch allocates
# and frees. Float32, one head, $d = 64$. The tile loop of `recompute_attention` runs in Python, and
# its number of tiles grows as $T^2$ even though its memory does not, so its curve stops at
# $T = 1024$ to keep this cell to a few seconds (raise it if you have the time).
# %%
MiB = 2**20
T_manual = [256, 512, 1024, 2048, 4096]
T_recompute = [256, 512, 1024]
measured = {}
try:
    gen = torch.Generator().manual_seed(6)
    for name, fn, lengths in [("manual_attention (saves P)", manual_attention, T_manual),
                              ("recompute_attention (saves L)", recompute_attention, T_recompute)]:
        measured[name] = {}
        for T in lengths:
            q, k, v, do = (randn(gen, 1, T, 64, dtype=torch.float32) for _ in range(4))  # (1, T, 64)
            measured[name][T] = backward_peak(fn, q, k, v, grad=do)
except NotImplementedError:
    print("Finish Parts A–F first: this cell measures manual_attention and recompute_attention.")

if len(measured) == 2:
    print(f"{'T':>5} | {'manual: saved + backward = total':>34} | {'recompute: saved + backward = total':>36}")
    for T in T_manual:
        row = [f"{T:5}"]
        for name in measured:
            m = measured[name].get(T)
            row.append(f"{m['saved'] / MiB:8.2f} + {m['backward'] / MiB:7.2f} = {m['total'] / MiB:7.2f} MiB" if m else " " * 34)
        print(" | ".join(row))
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, by_T in measured.items():
        ax.loglog(list(by_T), [m["total"] / MiB for m in by_T.values()], marker="o", label=name)
    by_manual, by_recompute = measured.values()
    T0, T1 = T_manual[0], T_recompute[-1]  # each guide passes through one measured point
    ax.loglog(T_manual, [by_manual[T0]["total"] / MiB * (T / T0) ** 2 for T in T_manual], "k:", linewidth=1,
              label="∝ T² (slope 2)")
    ax.loglog(T_manual, [by_recompute[T1]["total"] / MiB * (T / T1) for T in T_manual], "k--", linewidth=1,
              label="∝ T (slope 1)")
    ax.set_xticks(T_manual, [str(T) for T in T_manual])
    ax.minorticks_off()
    ax.set(xlabel="sequence length T", ylabel="peak memory of the backward (MiB)",
           title="backward memory, one head, d = 64, float32 (measured)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    plt.show()

# %% [markdown]
# On log–log axes a power law is a straight line, and its slope is the power. The backward that
# saved $P$ climbs with slope 2: every doubling of $T$ quadruples it, because $P$, $\bar P$ and
# $\bar S$ are each $T \times T$ (with a temporary or two of the same size on the way). The
# recompute backward climbs with slope 1 (a little less at small $T$, where the fixed $64 \times 64$
# tile is a visible share): its largest tensors are $(T, d)$. Extend its dashed line to $T = 4096$ and
# it reads a few MiB, against hundreds of MiB for the backward that saved $P$ — for one head. On a GPU
# the steeper curve is the one that runs out of memory first.
#
# ## 7 · D in Triton: the preprocess kernel
#
# On a GPU, FlashAttention's backward starts with a small kernel that computes $D$ for every row
# before the main kernels run, so that each of them can load $D_i$ for its query block like any
# other input. Rows are (batch, token) pairs: view $O$ and $\bar O$ as `n_rows` $= B \cdot T$ rows of
# `head_dim` $= d$. Each program takes a **block of `BLOCK_M` rows**, loads a
# $(\text{BLOCK\_M}, \text{BLOCK\_D})$ tile of $O$ and one of $\bar O$, multiplies them, sums each row,
# and stores `BLOCK_M` numbers. It reads $2d$ and writes 1 per row: $D$ costs one pass over two
# $T \times d$ tensors, nothing more.
#
# A 2-D block needs two masks, one per axis:
#
# - **rows**: `rows = program_id · BLOCK_M + arange(BLOCK_M)`, and the last program's block runs past
#   `n_rows` whenever $B \cdot T$ is not a multiple of `BLOCK_M` — mask `rows < n_rows`;
# - **columns**: `BLOCK_D` is `head_dim` rounded up to a power of two (`tl.arange` needs one) —
#   mask `cols < head_dim`, with `other=0.0` so that the padding adds nothing to the sum.
#
# Combine them by broadcasting: `rows[:, None] < n_rows` is a column, `cols[None, :] < head_dim` a row,
# and `&` makes the $(\text{BLOCK\_M}, \text{BLOCK\_D})$ mask. Row $r$ of $O$ starts at
# `O_ptr + r * o_row_stride`; never assume the stride is `head_dim`.
#
# ## Part G — attention_delta_kernel (2 points)
#
# Write the body of the kernel. The signature is fixed; the checks and §8 launch it as
#
# ```python
# grid = (triton.cdiv(n_rows, BLOCK_M),)
# attention_delta_kernel[grid](o, do, delta, o.stride(0), do.stride(0), n_rows, head_dim,
#                              BLOCK_M=BLOCK_M, BLOCK_D=triton.next_power_of_2(head_dim))
# ```
#
# for `o`, `do` of shape `(n_rows, head_dim)` (each row contiguous, rows the given strides apart) and
# `delta` a contiguous vector of `n_rows`. Compute in the dtype you load (float64 stays float64).
# The test cell launches it on views into wider buffers whose padding holds NaN, with `n_rows` not a
# multiple of `BLOCK_M` and head dims that are not powers of two: a missing mask shows up.
# %% solution id=attention_delta_kernel
import triton
import triton.language as tl


@triton.jit
def attention_delta_kernel(
    O_ptr,  # (n_rows, head_dim) forward output O; row r starts at O_ptr + r * o_row_stride
    DO_ptr,  # (n_rows, head_dim) upstream gradient Ō; row r starts at DO_ptr + r * do_row_stride
    Delta_ptr,  # (n_rows,) result D, contiguous
    o_row_stride,  # elements from one row of O to the next
    do_row_stride,  # elements from one row of DO to the next
    n_rows,  # B·T rows
    head_dim,  # d, the length of a row
    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_D: tl.constexpr,  # a power of two ≥ head_dim
):
    """D = rowsum(Ō ⊙ O), i.e. D_r = Σ_e Ō[r, e]·O[r, e], for one block of BLOCK_M rows per program.

    Reads 2·head_dim elements and writes one per row.
    """
    ### BEGIN SOLUTION
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) this program's rows
    cols = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    row_ok = rows < n_rows  # the last block may run past the end
    mask = row_ok[:, None] & (cols[None, :] < head_dim)  # (BLOCK_M, BLOCK_D)
    r = rows.to(tl.int64)[:, None]  # int64: row · stride can pass 2³¹ on a large tensor
    # Padding lanes load 0, so they add nothing to the row sums.
    o = tl.load(O_ptr + r * o_row_stride + cols[None, :], mask=mask, other=0.0)  # read BLOCK_M·d
    do = tl.load(DO_ptr + r * do_row_stride + cols[None, :], mask=mask, other=0.0)  # read BLOCK_M·d
    D = tl.sum(o * do, axis=1)  # (BLOCK_M,)
    tl.store(Delta_ptr + rows, D, mask=row_ok)  # write BLOCK_M
    ### END SOLUTION

# %% test id=test_attention_delta_kernel points=2
"""attention_delta_kernel: D = rowsum(Ō ⊙ O) against torch for n_rows not a multiple of BLOCK_M and head dims that are not powers of two, float32 and float64, O and Ō inside NaN-padded buffers; nothing written past n_rows."""
course.selfcheck.attention_delta_kernel(attention_delta_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.attention_delta_kernel(attention_delta_kernel)
### END HIDDEN TESTS

# %% [markdown]
# The host function that launches it for tensors of shape $(B, T, d)$:
# %%
def attention_delta(o, do, BLOCK_M=16):
    """D = rowsum(Ō ⊙ O) of shape (B, T), for o and do of shape (B, T, d), by attention_delta_kernel."""
    B, T, d = o.shape  # batch, tokens, head dim
    o2 = o.reshape(B * T, d).contiguous()  # (B·T, d): rows with contiguous elements
    do2 = do.reshape(B * T, d).contiguous()
    delta = torch.empty(B * T, dtype=o.dtype, device=o.device)  # (B·T,)
    grid = (triton.cdiv(B * T, BLOCK_M),)  # one program per block of rows
    attention_delta_kernel[grid](o2, do2, delta, o2.stride(0), do2.stride(0), B * T, d,
                                 BLOCK_M=BLOCK_M, BLOCK_D=triton.next_power_of_2(d))
    return delta.view(B, T)

# %% [markdown]
# ## 8 · FlashAttention in Triton, read and run
#
# Here is the whole thing as Triton kernels: a forward that saves $O$ and $L$, your $D$ kernel, and
# two backward kernels. Read them against §4 and §5; every line has a formula there. (The course's
# reference version, `kernels/attention.py`, is the same design with causal masking and GPU block
# sizes added.)
#
# The one new idea is the **second backward kernel**. Part D's loop adds into $\bar Q$ from every key
# block. On a GPU the key blocks are different programs running at the same time, so those additions
# would race: they need atomic adds (FlashAttention-2 does that), or a different split of the work.
# These kernels split it: `flash_bwd_dkdv_kernel` runs one program per key block and finishes
# $\bar K_j$, $\bar V_j$ (its inner loop over query blocks is Part D's); `flash_bwd_dq_kernel` runs
# one program per query block and finishes $\bar Q_i$, walking the key blocks. No program ever writes
# what another writes, so no atomics, and the result is deterministic. The price: the second kernel
# rebuilds $S$ and $\bar P$ once more — seven $N \times N \times d$ products instead of five, all on
# chip, none of them $N \times N$ in memory.
#
# Each program handles one block of rows of one $(T, d)$ slab (`program_id(1)` picks the slab, which
# is a (batch, head) pair), with `BLOCK_D` = $d$ rounded up to a power of two, at least 16 (`tl.dot`
# needs every dimension ≥ 16). Keys past $T$ get score $-\infty$ in the forward and $P = 0$ in the
# backward, so a $T$ that is not a multiple of the block costs nothing but masked lanes.
# %%
@triton.jit
def flash_fwd_kernel(
    Q_ptr,  # (BH, T, d) queries, contiguous
    K_ptr,  # (BH, T, d) keys
    V_ptr,  # (BH, T, d) values
    O_ptr,  # (BH, T, d) output O
    L_ptr,  # (BH, T) output L = m + log ℓ per query row
    sm_scale,  # c = 1/√d
    seq_len,  # T
    head_dim,  # d
    BLOCK_M: tl.constexpr,  # queries per program
    BLOCK_N: tl.constexpr,  # keys per step of the loop
    BLOCK_D: tl.constexpr,  # a power of two ≥ head_dim, ≥ 16
):
    """O = softmax(c·Q Kᵀ) V and L for one block of queries, walking key blocks with the online softmax of §4."""
    bh = tl.program_id(1).to(tl.int64)
    base = bh * seq_len * head_dim  # start of this slab
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    q_mask = (rows[:, None] < seq_len) & (cols[None, :] < head_dim)
    q = tl.load(Q_ptr + base + rows[:, None] * head_dim + cols[None, :], mask=q_mask, other=0.0)
    m = tl.full([BLOCK_M], -float("inf"), dtype=q.dtype)  # running row max
    ell = tl.zeros([BLOCK_M], dtype=q.dtype)  # running Σ exp(S − m)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=q.dtype)  # running Σ exp(S − m) V
    for start_n in range(0, seq_len, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (keys[:, None] < seq_len) & (cols[None, :] < head_dim)
        k = tl.load(K_ptr + base + keys[:, None] * head_dim + cols[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V_ptr + base + keys[:, None] * head_dim + cols[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale  # (BLOCK_M, BLOCK_N): a tile of S, in registers only
        s = tl.where(keys[None, :] < seq_len, s, -float("inf"))  # keys past T get no weight
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        ell = ell * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m = m_new
    tl.store(O_ptr + base + rows[:, None] * head_dim + cols[None, :], acc / ell[:, None], mask=q_mask)
    tl.store(L_ptr + bh * seq_len + rows, m + tl.log(ell), mask=rows < seq_len)


@triton.jit
def flash_bwd_dkdv_kernel(
    Q_ptr,  # (BH, T, d)
    K_ptr,  # (BH, T, d)
    V_ptr,  # (BH, T, d)
    DO_ptr,  # (BH, T, d) upstream gradient Ō
    L_ptr,  # (BH, T) saved L
    Delta_ptr,  # (BH, T) D from attention_delta_kernel
    DK_ptr,  # (BH, T, d) result K̄
    DV_ptr,  # (BH, T, d) result V̄
    sm_scale,  # c
    seq_len,  # T
    head_dim,  # d
    BLOCK_M: tl.constexpr,  # queries per step of the loop
    BLOCK_N: tl.constexpr,  # keys per program
    BLOCK_D: tl.constexpr,  # a power of two ≥ head_dim, ≥ 16
):
    """V̄_j = Σ_i P_ijᵀ Ō_i and K̄_j = c·Σ_i S̄_ijᵀ Q_i for one key block j, with P_ij = exp(S_ij − L_i)."""
    bh = tl.program_id(1).to(tl.int64)
    base = bh * seq_len * head_dim
    keys = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    kv_mask = (keys[:, None] < seq_len) & (cols[None, :] < head_dim)
    k = tl.load(K_ptr + base + keys[:, None] * head_dim + cols[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V_ptr + base + keys[:, None] * head_dim + cols[None, :], mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=k.dtype)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=k.dtype)
    for start_m in range(0, seq_len, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        row_ok = rows < seq_len
        q_mask = row_ok[:, None] & (cols[None, :] < head_dim)
        q = tl.load(Q_ptr + base + rows[:, None] * head_dim + cols[None, :], mask=q_mask, other=0.0)
        do = tl.load(DO_ptr + base + rows[:, None] * head_dim + cols[None, :], mask=q_mask, other=0.0)
        L = tl.load(L_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)
        D = tl.load(Delta_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale  # (BLOCK_M, BLOCK_N)
        # Rebuild the tile of P from L; outside the T×T square it is 0.
        p = tl.where(row_ok[:, None] & (keys[None, :] < seq_len), tl.exp(s - L[:, None]), 0.0)
        dv += tl.dot(tl.trans(p), do)
        dp = tl.dot(do, tl.trans(v))  # (BLOCK_M, BLOCK_N)
        ds = p * (dp - D[:, None])
        dk += tl.dot(tl.trans(ds), q)
    tl.store(DK_ptr + base + keys[:, None] * head_dim + cols[None, :], dk * sm_scale, mask=kv_mask)
    tl.store(DV_ptr + base + keys[:, None] * head_dim + cols[None, :], dv, mask=kv_mask)


@triton.jit
def flash_bwd_dq_kernel(
    Q_ptr,  # (BH, T, d)
    K_ptr,  # (BH, T, d)
    V_ptr,  # (BH, T, d)
    DO_ptr,  # (BH, T, d) upstream gradient Ō
    L_ptr,  # (BH, T) saved L
    Delta_ptr,  # (BH, T) D from attention_delta_kernel
    DQ_ptr,  # (BH, T, d) result Q̄
    sm_scale,  # c
    seq_len,  # T
    head_dim,  # d
    BLOCK_M: tl.constexpr,  # queries per program
    BLOCK_N: tl.constexpr,  # keys per step of the loop
    BLOCK_D: tl.constexpr,  # a power of two ≥ head_dim, ≥ 16
):
    """Q̄_i = c·Σ_j S̄_ij K_j for one query block i, with S̄_ij = P_ij ⊙ (Ō_i V_jᵀ − D_i) rebuilt per key block."""
    bh = tl.program_id(1).to(tl.int64)
    base = bh * seq_len * head_dim
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < seq_len
    q_mask = row_ok[:, None] & (cols[None, :] < head_dim)
    q = tl.load(Q_ptr + base + rows[:, None] * head_dim + cols[None, :], mask=q_mask, other=0.0)
    do = tl.load(DO_ptr + base + rows[:, None] * head_dim + cols[None, :], mask=q_mask, other=0.0)
    L = tl.load(L_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)
    D = tl.load(Delta_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=q.dtype)
    for start_n in range(0, seq_len, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (keys[:, None] < seq_len) & (cols[None, :] < head_dim)
        k = tl.load(K_ptr + base + keys[:, None] * head_dim + cols[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V_ptr + base + keys[:, None] * head_dim + cols[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        p = tl.where(row_ok[:, None] & (keys[None, :] < seq_len), tl.exp(s - L[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - D[:, None])  # S̄ again: the price of no atomics
        dq += tl.dot(ds, k)
    tl.store(DQ_ptr + base + rows[:, None] * head_dim + cols[None, :], dq * sm_scale, mask=q_mask)

# %% [markdown]
# The host side: allocate, pick the blocks, launch; then the `autograd.Function` that saves what
# Part E saved. The backward computes $D$ with your `attention_delta_kernel` once it passes the
# Part G check, and with torch until then. (A kernel whose store lacks its mask writes past the end
# of `delta`, into memory that belongs to something else: in the interpreter that can crash the
# whole notebook, so it is launched on real buffers only after the check, which uses padded ones.)
# %%
import contextlib
import io


def delta_kernel_passes_its_check():
    """Whether attention_delta_kernel passes the Part G check, run quietly."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            course.selfcheck.attention_delta_kernel(attention_delta_kernel)
        return True
    except AssertionError:  # a failed check, "not implemented" included
        return False


BLOCK = 32  # rows per block in every kernel here; tl.dot needs ≥ 16


def flash_forward(q, k, v):
    """(o, L) for q, k, v of shape (B, T, d) by flash_fwd_kernel: o (B, T, d), L (B, T)."""
    B, T, d = q.shape  # batch (× heads), tokens, head dim
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty_like(q)  # (B, T, d)
    L = torch.empty(B, T, dtype=q.dtype, device=q.device)  # (B, T)
    grid = (triton.cdiv(T, BLOCK), B)  # a program per (query block, slab)
    flash_fwd_kernel[grid](q, k, v, o, L, 1 / math.sqrt(d), T, d,
                           BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_D=max(16, triton.next_power_of_2(d)))
    return o, L


def flash_backward(q, k, v, o, L, do):
    """(dq, dk, dv), each (B, T, d): D first, then K̄, V̄ per key block and Q̄ per query block."""
    B, T, d = q.shape
    do = do.contiguous()
    D = attention_delta(o, do) if USE_DELTA_KERNEL else (do * o).sum(dim=-1)  # (B, T)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    block_d = max(16, triton.next_power_of_2(d))
    grid = (triton.cdiv(T, BLOCK), B)
    flash_bwd_dkdv_kernel[grid](q, k, v, do, L, D, dk, dv, 1 / math.sqrt(d), T, d,
                                BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_D=block_d)
    flash_bwd_dq_kernel[grid](q, k, v, do, L, D, dq, 1 / math.sqrt(d), T, d,
                              BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_D=block_d)
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """Attention by the Triton kernels above; saves q, k, v, o and L, nothing T×T."""

    @staticmethod
    def forward(ctx, q, k, v):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        o, L = flash_forward(q, k, v)
        ctx.save_for_backward(q, k, v, o, L)
        return o

    @staticmethod
    def backward(ctx, do):
        return flash_backward(*ctx.saved_tensors, do)

# %% [markdown]
# Run it — on the CPU through Triton's interpreter, which executes the same kernels one program at a
# time. $T = 100$ is not a multiple of the block, and $d = 24$ is padded to 32 lanes. It is compared
# with PyTorch's attention and its autograd, and with your `recompute_attention`.
# %%
USE_DELTA_KERNEL = delta_kernel_passes_its_check()
print("D by", "your attention_delta_kernel" if USE_DELTA_KERNEL else "torch (Part G is not passing yet)")
dtype = F64 if course.INTERPRETED else torch.float32  # float64 dots are exact in the interpreter
gen = torch.Generator().manual_seed(8)
q, k, v, do = (randn(gen, 2, 100, 24).to(course.DEVICE, dtype) for _ in range(4))  # (B, T, d)
leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
o_flash = FlashAttention.apply(*leaves)
grads_flash = torch.autograd.grad(o_flash, leaves, do)

ref = [t.clone().requires_grad_(True) for t in (q, k, v)]
o_ref = F.scaled_dot_product_attention(*ref)
grads_ref = torch.autograd.grad(o_ref, ref, do)
print("Triton FlashAttention vs scaled_dot_product_attention, relative errors:")
for name, mine, theirs in zip(["o", "dq", "dk", "dv"], [o_flash, *grads_flash], [o_ref, *grads_ref]):
    print(f"  {name}: {course.relative_error(mine, theirs):.0e}")
try:
    cpu = [t.detach().cpu().to(F64).requires_grad_(True) for t in (q, k, v)]
    o_mine = recompute_attention(*cpu)
    grads_mine = torch.autograd.grad(o_mine, cpu, do.cpu().to(F64))
    worst = max(course.relative_error(a.cpu(), b) for a, b in zip([o_flash, *grads_flash], [o_mine, *grads_mine]))
    print(f"Triton FlashAttention vs your recompute_attention: largest relative error {worst:.0e}")
except NotImplementedError:
    print("Finish Parts C–F to compare with your recompute_attention as well.")

# %% [markdown]
# ## What to take away
#
# - Attention's backward, op by op: $\bar V = P^\top \bar O$, $\bar P = \bar O V^\top$,
#   $\bar S = P \odot (\bar P - D)$, $\bar Q = c\,\bar S K$, $\bar K = c\,\bar S^\top Q$. Each matmul
#   gives a pair of products; the softmax is the one step that is not a matmul; $c = 1/\sqrt d$ lands in
#   both $\bar Q$ and $\bar K$.
# - $D = \operatorname{rowsum}(\bar P \odot P) = \operatorname{rowsum}(\bar O \odot O)$: the softmax's row
#   scalar from two $T \times d$ tensors, computed before any of $P$ exists.
# - Save $L = m + \log \ell$ per row, not $P$: $P = e^{S - L}$ is exact, overflow-free and cheap to
#   rebuild tile by tile.
# - A blockwise backward — keys outside, queries inside — needs $O(T)$ memory instead of $O(T^2)$. It
#   does one more matmul's worth of FLOPs and still wins, because attention's backward was waiting on
#   memory, not arithmetic.
# - On a GPU, $\bar Q$'s sum over key blocks crosses programs: atomics, or a second kernel per query block.
#
# Next, notebook 06: top-k routing, where the backward is a scatter and the question is which
# additions can collide.
