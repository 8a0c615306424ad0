# %% [markdown]
# # 10 · Attention as it is trained: causal, grouped-query, packed
#
# Notebook 05 derived attention's backward with recompute on full attention: every query sees every key. No
# language model trains that way. Three changes sit between notebook 05 and a real training step, and each one
# changes the backward in a way a kernel writer has to work out:
#
# 1. **Causal masking.** A query sees only the keys at or before its own position. Half of the score matrix is
#    never needed, so a kernel should not visit those tiles at all, and only the tiles the diagonal crosses need
#    an element mask.
# 2. **Grouped-query attention (GQA).** Llama 3, Mistral and Qwen give $G$ = 4–8 query heads one shared key/value
#    head. The forward reads the shared head; the backward has to *sum* $\bar K$ and $\bar V$ over the $G$ query
#    heads of a group, which is a sum across programs again (notebook 09's question).
# 3. **Packed sequences.** Short documents are laid end to end in one row so that no token is padding; each
#    query sees only its own document's keys. FlashAttention's varlen API describes the packing with
#    `cu_seqlens`, the documents' start offsets.
#
# | part | you write | points |
# |---|---|---|
# | A | `causal_fwd_kernel` — `@triton.jit`: the causal forward for one block of queries of one head, K/V read from its group's head | 2 |
# | B | `causal_bwd_dq_kernel` — `@triton.jit`: $\bar Q$ for one block of queries, the key walk stopping at the diagonal | 2 |
# | C | `causal_bwd_dkdv_kernel` — `@triton.jit`: $\bar K$ and $\bar V$ for one block of keys of one query head, summed into its group's K/V head | 3 |
# | D | `varlen_fwd_kernel` — `@triton.jit`: the causal forward over packed documents, one block of one document's queries per program | 2 |
#
# **Notation** (notebook 05's). One head's $q$, $k$, $v$ are $(T, d)$; $c = 1/\sqrt d$; $S = c\,qk^\top$,
# $P = \operatorname{softmax}(S)$ row by row, $O = Pv$, and $L = m + \log \ell$ per query row is what the forward
# saves. $\bar t$ (in code `dt`) is the gradient of the loss with respect to $t$. The backward's row scalar is
# $D = \operatorname{rowsum}(\bar O \odot O)$.
# %%
import course

# %% [markdown]
# **The given cell** holds what you do not write: the block sizes of this notebook's launches and the launchers
# that allocate outputs and launch your kernels. Every kernel sees its tensors as *slabs*: $(B \cdot H, T, d)$ for
# $q$, $O$, $\bar O$, $\bar Q$ and $(B \cdot H_{kv}, T, d)$ for $k$, $v$, $\bar K$, $\bar V$, all with the same three
# strides; $L$ and $D$ are contiguous $(B \cdot H, T)$.
# %%
import math

import torch

import triton
import triton.language as tl

DEVICE = course.DEVICE  # cuda with a GPU; else cpu, with the kernels in Triton's interpreter
F64 = torch.float64
BLOCK_M = 16  # queries per block (the interpreter's tl.dot needs 16 or more)
BLOCK_N = 16  # keys per block


def cdiv(a, b):
    return (a + b - 1) // b


def accumulator(dtype):
    """The dtype of every running sum, of L and D: float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def block_d(d):
    """The head dim padded to a power of two of at least 16 lanes."""
    return max(16, triton.next_power_of_2(d))


def as_slabs(t):
    """(B, H, T, d) -> a contiguous (B·H, T, d): every slab tensor of a launch then shares one set of strides."""
    return t.reshape(-1, *t.shape[-2:]).contiguous()


def causal_forward(q, k, v, block_m=BLOCK_M, block_n=BLOCK_N):
    """Given: (o, L) for q (B, H, T, d) and k, v (B, H_kv, T, d) by causal_fwd_kernel; o like q, L (B, H, T)."""
    B, H, T, d = q.shape
    group = H // k.shape[1]  # G query heads per K/V head
    qs, ks, vs = as_slabs(q), as_slabs(k), as_slabs(v)
    o = torch.empty_like(qs)
    L = torch.empty(B * H, T, dtype=accumulator(q.dtype), device=q.device)
    causal_fwd_kernel[(cdiv(T, block_m), B * H)](
        qs, ks, vs, o, L, *qs.stride(), 1 / math.sqrt(d), T, d, group,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d(d))
    return o.view(q.shape), L.view(B, H, T)


def causal_backward(q, k, v, o, L, do, block_m=BLOCK_M, block_n=BLOCK_N):
    """Given: (dq, dk, dv) by causal_bwd_dq_kernel and causal_bwd_dkdv_kernel; D from torch (notebook 05 made it a kernel)."""
    B, H, T, d = q.shape
    group = H // k.shape[1]
    qs, ks, vs, os_, dos = (as_slabs(t) for t in (q, k, v, o, do))
    acc = accumulator(q.dtype)
    D = (dos.to(acc) * os_.to(acc)).sum(-1)  # (B·H, T), like L
    Ls = L.reshape(B * H, T).contiguous()
    dq = torch.empty_like(qs)
    dk = torch.zeros(ks.shape, dtype=acc, device=k.device)  # zeroed, in the sums' dtype: Part C adds into them
    dv = torch.zeros(vs.shape, dtype=acc, device=v.device)
    scale = 1 / math.sqrt(d)
    causal_bwd_dq_kernel[(cdiv(T, block_m), B * H)](
        qs, ks, vs, dos, Ls, D, dq, *qs.stride(), scale, T, d, group,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d(d))
    causal_bwd_dkdv_kernel[(cdiv(T, block_n), B * H)](
        qs, ks, vs, dos, Ls, D, dk, dv, *qs.stride(), scale, T, d, group,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d(d))
    return dq.view(q.shape), dk.to(k.dtype).view(k.shape), dv.to(v.dtype).view(v.shape)


class CausalAttention(torch.autograd.Function):
    """Causal (grouped-query) attention by your kernels; saves q, k, v, o and L, nothing T×T."""

    @staticmethod
    def forward(ctx, q, k, v):
        o, L = causal_forward(q, k, v)
        ctx.save_for_backward(q, k, v, o, L)
        return o

    @staticmethod
    def backward(ctx, do):
        return causal_backward(*ctx.saved_tensors, do)


def varlen_forward(q, k, v, cu_seqlens, max_seqlen, block_m=BLOCK_M, block_n=BLOCK_N):
    """Given: (o, L) for packed documents by varlen_fwd_kernel, laid out as FlashAttention's varlen API lays them:
    q (total, H, d), k and v (total, H_kv, d), cu_seqlens int32 (n_docs + 1,); o like q, L (H, total)."""
    total, H, d = q.shape
    group = H // k.shape[1]
    qs, ks, vs = (t.transpose(0, 1).contiguous() for t in (q, k, v))  # (heads, total, d): one set of strides
    o = torch.empty_like(qs)
    L = torch.empty(H, total, dtype=accumulator(q.dtype), device=q.device)
    n_docs = cu_seqlens.numel() - 1
    varlen_fwd_kernel[(cdiv(max_seqlen, block_m), H, n_docs)](
        qs, ks, vs, o, L, cu_seqlens, *qs.stride(), 1 / math.sqrt(d), total, d, group,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d(d))
    return o.transpose(0, 1), L

# %% [markdown]
# ## Part A — causal_fwd_kernel (2 points)
#
# One program per block of `BLOCK_M` queries of one query head (`program_id(0)` the block, `program_id(1)` the
# slab $b \cdot H + h$). Its K/V head is slab `bh // group`. Visit only the key blocks the causal mask leaves
# something in, and mask elements only where the diagonal crosses a tile. Write $O$ and $L$ for this program's rows.
# %% solution id=causal_fwd_kernel
@triton.jit
def causal_fwd_kernel(
    Q_ptr,  # (B·H, T, d) queries
    K_ptr,  # (B·H_kv, T, d) keys
    V_ptr,  # (B·H_kv, T, d) values
    O_ptr,  # (B·H, T, d) output O
    L_ptr,  # (B·H, T) output L = m + log ℓ per query row, contiguous
    stride_bh,  # elements from one slab to the next (Q, K, V and O alike)
    stride_t,  # elements from one token to the next
    stride_e,  # elements from one head-dim entry to the next
    sm_scale,  # c = 1/√d
    seq_len,  # T
    head_dim,  # d
    group,  # G: query heads per K/V head
    BLOCK_M: tl.constexpr,  # queries per program
    BLOCK_N: tl.constexpr,  # keys per step of the loop
    BLOCK_D: tl.constexpr,  # a power of two ≥ head_dim, ≥ 16
):
    """Causal O = softmax(c·Q Kᵀ) V and L for one block of BLOCK_M queries of one query head.

    Grid (cdiv(T, BLOCK_M), B·H). Element (s, t, e) of a slab tensor sits at ptr + s·stride_bh + t·stride_t +
    e·stride_e; row t of slab bh of L at L_ptr + bh·seq_len + t. Query slab bh reads K/V slab bh // group.
    Query i sees key j only when j ≤ i. Writes O and L for this program's rows, and nothing else.
    """
    bh = tl.program_id(1).to(tl.int64)  # this program's query slab; int64: bh · stride_bh can pass 2³¹
    q_base = bh * stride_bh
    kv_base = (bh // group) * stride_bh  # the K/V head this query head reads
    start_m = tl.program_id(0) * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)  # (BLOCK_M,) this program's queries
    cols = tl.arange(0, BLOCK_D)  # head-dim lanes
    q_mask = (rows[:, None] < seq_len) & (cols[None, :] < head_dim)
    q_offs = q_base + rows[:, None] * stride_t + cols[None, :] * stride_e  # rows of Q, and of O
    q = tl.load(Q_ptr + q_offs, mask=q_mask, other=0.0)
    acc_dtype = tl.float64 if q.dtype == tl.float64 else tl.float32
    ### BEGIN SOLUTION
    m = tl.full([BLOCK_M], -float("inf"), dtype=acc_dtype)
    ell = tl.zeros([BLOCK_M], dtype=acc_dtype)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=acc_dtype)
    diagonal = (start_m // BLOCK_N) * BLOCK_N  # the first key block the diagonal crosses
    end = tl.minimum(start_m + BLOCK_M, seq_len)  # past the block's last query: keys no row of it sees
    for start_n in range(0, end, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kv_offs = kv_base + keys[:, None] * stride_t + cols[None, :] * stride_e
        kv_mask = (keys[:, None] < seq_len) & (cols[None, :] < head_dim)
        k = tl.load(K_ptr + kv_offs, mask=kv_mask, other=0.0)
        v = tl.load(V_ptr + kv_offs, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        if start_n >= diagonal:  # only the tiles the diagonal crosses hold keys some row must not see
            s = tl.where(keys[None, :] <= rows[:, None], s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        ell = ell * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    tl.store(O_ptr + q_offs, acc / ell[:, None], mask=q_mask)
    tl.store(L_ptr + bh * seq_len + rows, m + tl.log(ell), mask=rows < seq_len)
    ### END SOLUTION

# %% test id=test_causal_fwd_kernel points=2
"""causal_fwd_kernel: o against causal scaled_dot_product_attention and L
against a masked logsumexp, T not a multiple of any block, G in {1, 4},
NaN-padded views, only the key blocks the mask leaves something in visited;
a float64 gradcheck through the kernel."""
course.selfcheck.causal_fwd_kernel(causal_fwd_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.causal_fwd_kernel(causal_fwd_kernel)
### END HIDDEN TESTS

# %% [markdown]
# ## Part B — causal_bwd_dq_kernel (2 points)
#
# One program per block of `BLOCK_M` queries of one query head, walking the key blocks: $\bar Q_i = c \sum_j
# \bar S_{ij} K_j$, with $P$ rebuilt from $L$ and $D$ given. Where does the walk stop?
# %% solution id=causal_bwd_dq_kernel
@triton.jit
def causal_bwd_dq_kernel(
    Q_ptr,  # (B·H, T, d) queries
    K_ptr,  # (B·H_kv, T, d) keys
    V_ptr,  # (B·H_kv, T, d) values
    DO_ptr,  # (B·H, T, d) upstream gradient Ō
    L_ptr,  # (B·H, T) saved L, contiguous
    Delta_ptr,  # (B·H, T) D = rowsum(Ō ⊙ O), contiguous
    DQ_ptr,  # (B·H, T, d) result Q̄
    stride_bh,  # strides shared by every slab tensor
    stride_t,
    stride_e,
    sm_scale,  # c
    seq_len,  # T
    head_dim,  # d
    group,  # G
    BLOCK_M: tl.constexpr,  # queries per program
    BLOCK_N: tl.constexpr,  # keys per step of the loop
    BLOCK_D: tl.constexpr,  # a power of two ≥ head_dim, ≥ 16
):
    """Causal Q̄ for one block of BLOCK_M queries of one query head. Grid (cdiv(T, BLOCK_M), B·H), the layout
    of causal_fwd_kernel. Writes Q̄ for this program's rows, and nothing else."""
    bh = tl.program_id(1).to(tl.int64)
    q_base = bh * stride_bh
    kv_base = (bh // group) * stride_bh
    start_m = tl.program_id(0) * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < seq_len
    q_mask = row_ok[:, None] & (cols[None, :] < head_dim)
    q_offs = q_base + rows[:, None] * stride_t + cols[None, :] * stride_e  # rows of Q, Ō and Q̄
    q = tl.load(Q_ptr + q_offs, mask=q_mask, other=0.0)
    do = tl.load(DO_ptr + q_offs, mask=q_mask, other=0.0)
    L = tl.load(L_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)
    D = tl.load(Delta_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)
    acc_dtype = tl.float64 if q.dtype == tl.float64 else tl.float32
    ### BEGIN SOLUTION
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=acc_dtype)
    for start_n in range(0, tl.minimum(start_m + BLOCK_M, seq_len), BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kv_offs = kv_base + keys[:, None] * stride_t + cols[None, :] * stride_e
        kv_mask = (keys[:, None] < seq_len) & (cols[None, :] < head_dim)
        k = tl.load(K_ptr + kv_offs, mask=kv_mask, other=0.0)
        v = tl.load(V_ptr + kv_offs, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        seen = row_ok[:, None] & (keys[None, :] <= rows[:, None])
        p = tl.where(seen, tl.exp(s - L[:, None]), 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - D[:, None])
        dq += tl.dot(ds.to(k.dtype), k)
    tl.store(DQ_ptr + q_offs, dq * sm_scale, mask=q_mask)
    ### END SOLUTION

# %% test id=test_causal_bwd_dq_kernel points=2
"""causal_bwd_dq_kernel: dq against the autograd of causal
scaled_dot_product_attention, T not a multiple of any block, G in {1, 4},
NaN-padded views; a float64 gradcheck through the kernel."""
course.selfcheck.causal_bwd_dq_kernel(causal_bwd_dq_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.causal_bwd_dq_kernel(causal_bwd_dq_kernel)
### END HIDDEN TESTS

# %% [markdown]
# ## Part C — causal_bwd_dkdv_kernel (3 points)
#
# One program per block of `BLOCK_N` keys **of one query head** (`program_id(1)` is the query slab, as in Parts A
# and B). $\bar K$ and $\bar V$ have the K/V heads' shape, and the launcher hands them over zeroed, in the sums'
# dtype: the $G$ query heads of a group all contribute to one K/V head's $\bar K$ and $\bar V$. How they get there is
# yours to choose — and the race sanitizer watches.
# %% solution id=causal_bwd_dkdv_kernel
@triton.jit
def causal_bwd_dkdv_kernel(
    Q_ptr,  # (B·H, T, d) queries
    K_ptr,  # (B·H_kv, T, d) keys
    V_ptr,  # (B·H_kv, T, d) values
    DO_ptr,  # (B·H, T, d) upstream gradient Ō
    L_ptr,  # (B·H, T) saved L, contiguous
    Delta_ptr,  # (B·H, T) D, contiguous
    DK_ptr,  # (B·H_kv, T, d) result K̄, zeroed, float32 (float64 for float64 inputs)
    DV_ptr,  # (B·H_kv, T, d) result V̄, zeroed, float32 (float64 for float64 inputs)
    stride_bh,  # strides shared by every slab tensor
    stride_t,
    stride_e,
    sm_scale,  # c
    seq_len,  # T
    head_dim,  # d
    group,  # G
    BLOCK_M: tl.constexpr,  # queries per step of the loop
    BLOCK_N: tl.constexpr,  # keys per program
    BLOCK_D: tl.constexpr,  # a power of two ≥ head_dim, ≥ 16
):
    """Causal K̄ and V̄ of one block of BLOCK_N keys, from one query head, into its group's K/V head.

    Grid (cdiv(T, BLOCK_N), B·H): the G programs of query slabs bh with one bh // group all hold shares of the
    same rows of K̄ and V̄. Writes K̄ and V̄ rows of this program's keys, and nothing else.
    """
    bh = tl.program_id(1).to(tl.int64)
    q_base = bh * stride_bh
    kv_base = (bh // group) * stride_bh
    start_n = tl.program_id(0) * BLOCK_N
    keys = start_n + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    kv_mask = (keys[:, None] < seq_len) & (cols[None, :] < head_dim)
    kv_offs = kv_base + keys[:, None] * stride_t + cols[None, :] * stride_e  # rows of K, V, K̄ and V̄
    k = tl.load(K_ptr + kv_offs, mask=kv_mask, other=0.0)
    v = tl.load(V_ptr + kv_offs, mask=kv_mask, other=0.0)
    acc_dtype = tl.float64 if k.dtype == tl.float64 else tl.float32
    ### BEGIN SOLUTION
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=acc_dtype)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=acc_dtype)
    for start_m in range((start_n // BLOCK_M) * BLOCK_M, seq_len, BLOCK_M):  # the first query that sees key start_n
        rows = start_m + tl.arange(0, BLOCK_M)
        row_ok = rows < seq_len
        q_mask = row_ok[:, None] & (cols[None, :] < head_dim)
        q_offs = q_base + rows[:, None] * stride_t + cols[None, :] * stride_e
        q = tl.load(Q_ptr + q_offs, mask=q_mask, other=0.0)
        do = tl.load(DO_ptr + q_offs, mask=q_mask, other=0.0)
        L = tl.load(L_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)
        D = tl.load(Delta_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        seen = row_ok[:, None] & (keys[None, :] <= rows[:, None])
        p = tl.where(seen, tl.exp(s - L[:, None]), 0.0)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do)
        ds = p * (tl.dot(do, tl.trans(v)) - D[:, None])
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q)
    tl.atomic_add(DK_ptr + kv_offs, dk * sm_scale, mask=kv_mask)  # the group's G programs add into one K/V head
    tl.atomic_add(DV_ptr + kv_offs, dv, mask=kv_mask)
    ### END SOLUTION

# %% test id=test_causal_bwd_dkdv_kernel points=3
"""causal_bwd_dkdv_kernel: dk and dv against the autograd of causal
scaled_dot_product_attention with enable_gqa, T not a multiple of any block,
G in {1, 4}, NaN-padded views; no two programs store to one element without
an atomic; a float64 gradcheck through the kernel."""
course.selfcheck.causal_bwd_dkdv_kernel(causal_bwd_dkdv_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.causal_bwd_dkdv_kernel(causal_bwd_dkdv_kernel)
### END HIDDEN TESTS

# %% [markdown]
# ## Part D — varlen_fwd_kernel (2 points)
#
# Several documents laid end to end: `cu_seqlens` holds where each starts (0 first, the total last). One program
# per block of `BLOCK_M` queries of one document and one head (`program_id(0)` the block inside the document,
# `program_id(1)` the head, `program_id(2)` the document); the grid is sized for the longest document. Each query
# sees only its own document's keys, and only the earlier ones.
# %% solution id=varlen_fwd_kernel
@triton.jit
def varlen_fwd_kernel(
    Q_ptr,  # (H, total, d) packed queries
    K_ptr,  # (H_kv, total, d) packed keys
    V_ptr,  # (H_kv, total, d) packed values
    O_ptr,  # (H, total, d) output O
    L_ptr,  # (H, total) output L, contiguous
    CU_ptr,  # (n_docs + 1,) int32: document b holds tokens cu[b] … cu[b + 1] − 1
    stride_h,  # elements from one head to the next (Q, K, V and O alike)
    stride_t,  # elements from one token to the next
    stride_e,  # elements from one head-dim entry to the next
    sm_scale,  # c
    total,  # tokens in the packed row: cu[n_docs]
    head_dim,  # d
    group,  # G
    BLOCK_M: tl.constexpr,  # queries per program
    BLOCK_N: tl.constexpr,  # keys per step of the loop
    BLOCK_D: tl.constexpr,  # a power of two ≥ head_dim, ≥ 16
):
    """Causal attention inside one document, for one block of its queries and one query head.

    Grid (cdiv(max_seqlen, BLOCK_M), H, n_docs). Query token i of document b sees key token j when
    cu[b] ≤ j ≤ i. Writes O and L (at L_ptr + h·total + token) for this program's rows, and nothing else.
    """
    h = tl.program_id(1).to(tl.int64)
    doc = tl.program_id(2)
    cols = tl.arange(0, BLOCK_D)
    ### BEGIN SOLUTION
    first = tl.load(CU_ptr + doc).to(tl.int64)  # the document's first token
    n = (tl.load(CU_ptr + doc + 1) - first).to(tl.int32)  # its length
    start_m = tl.program_id(0) * BLOCK_M
    if start_m >= n:  # a document shorter than the longest has fewer blocks: this one has nothing to do
        return
    q_base = h * stride_h + first * stride_t
    kv_base = (h // group) * stride_h + first * stride_t
    rows = start_m + tl.arange(0, BLOCK_M)  # positions inside the document
    q_mask = (rows[:, None] < n) & (cols[None, :] < head_dim)
    q_offs = q_base + rows[:, None] * stride_t + cols[None, :] * stride_e
    q = tl.load(Q_ptr + q_offs, mask=q_mask, other=0.0)
    acc_dtype = tl.float64 if q.dtype == tl.float64 else tl.float32
    m = tl.full([BLOCK_M], -float("inf"), dtype=acc_dtype)
    ell = tl.zeros([BLOCK_M], dtype=acc_dtype)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=acc_dtype)
    for start_n in range(0, tl.minimum(start_m + BLOCK_M, n), BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kv_offs = kv_base + keys[:, None] * stride_t + cols[None, :] * stride_e
        kv_mask = (keys[:, None] < n) & (cols[None, :] < head_dim)
        k = tl.load(K_ptr + kv_offs, mask=kv_mask, other=0.0)
        v = tl.load(V_ptr + kv_offs, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        s = tl.where(keys[None, :] <= rows[:, None], s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        ell = ell * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    tl.store(O_ptr + q_offs, acc / ell[:, None], mask=q_mask)
    tl.store(L_ptr + h * total + first + rows, m + tl.log(ell), mask=rows < n)
    ### END SOLUTION

# %% test id=test_varlen_fwd_kernel points=2
"""varlen_fwd_kernel: o and L against causal attention run document by
document, boundaries inside tiles, documents shorter than a block, G in
{1, 4}, NaN-padded views; nothing read from another document."""
course.selfcheck.varlen_fwd_kernel(varlen_fwd_kernel)
### BEGIN HIDDEN TESTS
import autograder.check
autograder.check.varlen_fwd_kernel(varlen_fwd_kernel)
### END HIDDEN TESTS
