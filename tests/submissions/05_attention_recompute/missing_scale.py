# Mutant: the 1/√d forgotten in the manual backward, the blockwise forward, the Triton forward and the Triton K̄, and a D kernel whose store has no row mask.
# expect: test_ManualAttention scale
# expect: test_manual_attention scale
# expect: test_attention_forward_lse scale
# expect: test_RecomputeAttention scale
# expect: test_recompute_attention scale
# expect: test_attention_delta_kernel wrong-values
# expect: test_flash_fwd_kernel scale
# expect: test_flash_bwd_dkdv_kernel scale
# %% ManualAttention
class ManualAttention(torch.autograd.Function):
    """The forward scales the scores; the backward forgets that S = c·QKᵀ: dq and dk are √d too large."""

    @staticmethod
    def forward(ctx, q, k, v):
        P = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1)
        ctx.save_for_backward(q, k, v, P)
        return P @ v

    @staticmethod
    def backward(ctx, do):
        q, k, v, P = ctx.saved_tensors
        dP = do @ v.mT
        dS = P * (dP - (dP * P).sum(dim=-1, keepdim=True))
        return dS @ k, dS.mT @ q, P.mT @ do
# %% attention_forward_lse
BLOCK_Q = 64
BLOCK_K = 64


def attention_forward_lse(q, k, v):
    """The online softmax is right, but the tiles of S are q kᵀ without the 1/√d."""
    B, T, d = q.shape
    o = torch.empty_like(q)
    lse = q.new_empty(B, T)
    for i in range(0, T, BLOCK_Q):
        qi = q[:, i:i + BLOCK_Q]
        m = qi.new_full(qi.shape[:2], -math.inf)
        ell = qi.new_zeros(qi.shape[:2])
        acc = torch.zeros_like(qi)
        for j in range(0, T, BLOCK_K):
            S = qi @ k[:, j:j + BLOCK_K].mT
            m_new = torch.maximum(m, S.amax(dim=-1))
            alpha = torch.exp(m - m_new)
            p = torch.exp(S - m_new[..., None])
            ell = alpha * ell + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ v[:, j:j + BLOCK_K]
            m = m_new
        o[:, i:i + BLOCK_Q] = acc / ell[..., None]
        lse[:, i:i + BLOCK_Q] = m + torch.log(ell)
    return o, lse
# %% attention_delta_kernel
import triton
import triton.language as tl


@triton.jit
def attention_delta_kernel(
    O_ptr,
    DO_ptr,
    Delta_ptr,
    o_row_stride,
    do_row_stride,
    n_rows,
    head_dim,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Loads are masked; the store writes all BLOCK_M rows, past n_rows in the last block."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < head_dim)
    o = tl.load(O_ptr + rows[:, None] * o_row_stride + cols[None, :], mask=mask, other=0.0)
    do = tl.load(DO_ptr + rows[:, None] * do_row_stride + cols[None, :], mask=mask, other=0.0)
    tl.store(Delta_ptr + rows, tl.sum(o * do, axis=1))
# %% flash_fwd_kernel
@triton.jit
def flash_fwd_kernel(
    Q_ptr,  # (BH, T, d) queries
    K_ptr,  # (BH, T, d) keys
    V_ptr,  # (BH, T, d) values
    O_ptr,  # (BH, T, d) output O
    L_ptr,  # (BH, T) output L = m + log ℓ per query row, contiguous
    stride_bh,  # elements from one slab of Q, K, V, O to the next
    stride_t,  # elements from one token (row) to the next
    stride_e,  # elements from one head-dim entry to the next
    sm_scale,  # c = 1/√d
    seq_len,  # T
    head_dim,  # d
    BLOCK_M: tl.constexpr,  # queries per program
    BLOCK_N: tl.constexpr,  # keys per step of the loop
    BLOCK_D: tl.constexpr,  # a power of two ≥ head_dim, ≥ 16
):
    """The tiles of S are Q Kᵀ without sm_scale: every softmax comes out too sharp."""
    bh = tl.program_id(1).to(tl.int64)  # this program's slab; int64: b · stride_bh can pass 2³¹
    base = bh * stride_bh  # start of the slab
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) this program's queries
    cols = tl.arange(0, BLOCK_D)  # head-dim lanes, (BLOCK_D,)
    q_mask = (rows[:, None] < seq_len) & (cols[None, :] < head_dim)  # (BLOCK_M, BLOCK_D): lanes that are data
    q_offs = base + rows[:, None] * stride_t + cols[None, :] * stride_e  # (BLOCK_M, BLOCK_D): these rows of Q, and of O
    q = tl.load(Q_ptr + q_offs, mask=q_mask, other=0.0)
    m = tl.full([BLOCK_M], -float("inf"), dtype=q.dtype)  # running row max
    ell = tl.zeros([BLOCK_M], dtype=q.dtype)  # running Σ exp(S − m)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=q.dtype)  # running Σ exp(S − m) V
    for start_n in range(0, seq_len, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
        kv_mask = (keys[:, None] < seq_len) & (cols[None, :] < head_dim)
        k = tl.load(K_ptr + base + keys[:, None] * stride_t + cols[None, :] * stride_e, mask=kv_mask, other=0.0)
        v = tl.load(V_ptr + base + keys[:, None] * stride_t + cols[None, :] * stride_e, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k))
        s = tl.where(keys[None, :] < seq_len, s, -float("inf"))  # keys past T get no weight: exp(−inf) = 0
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)  # restates the old sums under the new max (0 at the first block)
        p = tl.exp(s - m_new[:, None])
        ell = ell * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m = m_new
    tl.store(O_ptr + q_offs, acc / ell[:, None], mask=q_mask)  # O shares Q's strides
    tl.store(L_ptr + bh * seq_len + rows, m + tl.log(ell), mask=rows < seq_len)
# %% flash_bwd_dkdv_kernel
@triton.jit
def flash_bwd_dkdv_kernel(
    Q_ptr,  # (BH, T, d) queries
    K_ptr,  # (BH, T, d) keys
    V_ptr,  # (BH, T, d) values
    DO_ptr,  # (BH, T, d) upstream gradient Ō
    L_ptr,  # (BH, T) saved L, contiguous
    Delta_ptr,  # (BH, T) D from attention_delta_kernel, contiguous
    DK_ptr,  # (BH, T, d) result K̄
    DV_ptr,  # (BH, T, d) result V̄
    stride_bh,  # elements from one slab of Q, K, V, Ō, K̄, V̄ to the next
    stride_t,  # elements from one token (row) to the next
    stride_e,  # elements from one head-dim entry to the next
    sm_scale,  # c = 1/√d
    seq_len,  # T
    head_dim,  # d
    BLOCK_M: tl.constexpr,  # queries per step of the loop
    BLOCK_N: tl.constexpr,  # keys per program
    BLOCK_D: tl.constexpr,  # a power of two ≥ head_dim, ≥ 16
):
    """K̄ is stored without sm_scale: √d times too large."""
    bh = tl.program_id(1).to(tl.int64)  # this program's slab
    base = bh * stride_bh
    keys = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,) this program's keys
    cols = tl.arange(0, BLOCK_D)  # head-dim lanes, (BLOCK_D,)
    key_ok = keys < seq_len  # the last key block may run past T
    kv_mask = key_ok[:, None] & (cols[None, :] < head_dim)  # (BLOCK_N, BLOCK_D): lanes that are data
    kv_offs = base + keys[:, None] * stride_t + cols[None, :] * stride_e  # (BLOCK_N, BLOCK_D): rows of K, V, K̄, V̄
    k = tl.load(K_ptr + kv_offs, mask=kv_mask, other=0.0)
    v = tl.load(V_ptr + kv_offs, mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=k.dtype)  # K̄_j, local until every query block has added to it
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=k.dtype)  # V̄_j
    for start_m in range(0, seq_len, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
        row_ok = rows < seq_len
        q_mask = row_ok[:, None] & (cols[None, :] < head_dim)
        q = tl.load(Q_ptr + base + rows[:, None] * stride_t + cols[None, :] * stride_e, mask=q_mask, other=0.0)
        do = tl.load(DO_ptr + base + rows[:, None] * stride_t + cols[None, :] * stride_e, mask=q_mask, other=0.0)
        L = tl.load(L_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)  # (BLOCK_M,)
        D = tl.load(Delta_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)  # (BLOCK_M,)
        s = tl.dot(q, tl.trans(k)) * sm_scale  # (BLOCK_M, BLOCK_N)
        # Rebuild the tile of P from L; outside the T×T square it is 0.
        p = tl.where(row_ok[:, None] & key_ok[None, :], tl.exp(s - L[:, None]), 0.0)
        dv += tl.dot(tl.trans(p), do)  # V̄_j += P_ijᵀ Ō_i
        dp = tl.dot(do, tl.trans(v))  # (BLOCK_M, BLOCK_N): P̄_ij = Ō_i V_jᵀ
        ds = p * (dp - D[:, None])  # S̄_ij
        dk += tl.dot(tl.trans(ds), q)  # K̄_j += S̄_ijᵀ Q_i; the scale waits for the store
    tl.store(DK_ptr + kv_offs, dk, mask=kv_mask)  # K̄ and V̄ share K's strides
    tl.store(DV_ptr + kv_offs, dv, mask=kv_mask)
