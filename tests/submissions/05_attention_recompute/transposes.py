# Mutant: K̄ built from S̄ instead of S̄ᵀ, the softmax step negated in the blockwise backward, and D and the Triton K̄/V̄ loop read with head_dim as the row stride.
# expect: test_ManualAttention transpose
# expect: test_manual_attention transpose
# expect: test_attention_backward_recompute sign
# expect: test_RecomputeAttention sign
# expect: test_recompute_attention sign
# expect: test_attention_delta_kernel wrong-values
# expect: test_flash_bwd_dkdv_kernel non-finite
# %% ManualAttention
class ManualAttention(torch.autograd.Function):
    """dk = c·S̄Q: the roles of Q and K swapped (shapes agree, since S̄ is square)."""

    @staticmethod
    def forward(ctx, q, k, v):
        P = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1)
        ctx.save_for_backward(q, k, v, P)
        return P @ v

    @staticmethod
    def backward(ctx, do):
        q, k, v, P = ctx.saved_tensors
        c = 1 / math.sqrt(q.shape[-1])
        dP = do @ v.mT
        dS = P * (dP - (dP * P).sum(dim=-1, keepdim=True))
        return c * (dS @ k), c * (dS @ q), P.mT @ do
# %% attention_backward_recompute
def attention_backward_recompute(q, k, v, o, lse, do):
    """S̄ = P ⊙ (D − P̄): the softmax VJP with its sign turned around, so dq and dk are negated."""
    B, T, d = q.shape
    c = 1 / math.sqrt(d)
    D = (do * o).sum(dim=-1)
    dq, dk, dv = torch.zeros_like(q), torch.empty_like(k), torch.empty_like(v)
    for j in range(0, T, BLOCK_K):
        kj, vj = k[:, j:j + BLOCK_K], v[:, j:j + BLOCK_K]
        dkj, dvj = torch.zeros_like(kj), torch.zeros_like(vj)
        for i in range(0, T, BLOCK_Q):
            qi, doi = q[:, i:i + BLOCK_Q], do[:, i:i + BLOCK_Q]
            P = torch.exp(c * (qi @ kj.mT) - lse[:, i:i + BLOCK_Q, None])
            dvj += P.mT @ doi
            dS = P * (D[:, i:i + BLOCK_Q, None] - doi @ vj.mT)
            dq[:, i:i + BLOCK_Q] += c * (dS @ kj)
            dkj += c * (dS.mT @ qi)
        dk[:, j:j + BLOCK_K], dv[:, j:j + BLOCK_K] = dkj, dvj
    return dq, dk, dv
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
    """Assumes rows are head_dim apart: right only when the rows are packed."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < head_dim)
    o = tl.load(O_ptr + rows[:, None] * head_dim + cols[None, :], mask=mask, other=0.0)
    do = tl.load(DO_ptr + rows[:, None] * head_dim + cols[None, :], mask=mask, other=0.0)
    tl.store(Delta_ptr + rows, tl.sum(o * do, axis=1), mask=rows < n_rows)
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
    """Addresses Q and Ō as if rows were head_dim apart: right only for contiguous tensors."""
    bh = tl.program_id(1).to(tl.int64)  # this program's slab
    base = bh * stride_bh
    keys = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,) this program's keys
    cols = tl.arange(0, BLOCK_D)  # (BLOCK_D,) head-dim lanes
    kv_mask = (keys[:, None] < seq_len) & (cols[None, :] < head_dim)  # (BLOCK_N, BLOCK_D)
    k = tl.load(K_ptr + base + keys[:, None] * stride_t + cols[None, :] * stride_e, mask=kv_mask, other=0.0)
    v = tl.load(V_ptr + base + keys[:, None] * stride_t + cols[None, :] * stride_e, mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=k.dtype)  # K̄_j, local until every query block has added to it
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=k.dtype)  # V̄_j
    for start_m in range(0, seq_len, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
        row_ok = rows < seq_len
        q_mask = row_ok[:, None] & (cols[None, :] < head_dim)
        q = tl.load(Q_ptr + base + rows[:, None] * head_dim + cols[None, :], mask=q_mask, other=0.0)
        do = tl.load(DO_ptr + base + rows[:, None] * head_dim + cols[None, :], mask=q_mask, other=0.0)
        L = tl.load(L_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)  # (BLOCK_M,)
        D = tl.load(Delta_ptr + bh * seq_len + rows, mask=row_ok, other=0.0)  # (BLOCK_M,)
        s = tl.dot(q, tl.trans(k)) * sm_scale  # (BLOCK_M, BLOCK_N)
        # Rebuild the tile of P from L; outside the T×T square it is 0.
        p = tl.where(row_ok[:, None] & (keys[None, :] < seq_len), tl.exp(s - L[:, None]), 0.0)
        dv += tl.dot(tl.trans(p), do)  # V̄_j += P_ijᵀ Ō_i
        dp = tl.dot(do, tl.trans(v))  # (BLOCK_M, BLOCK_N): P̄_ij = Ō_i V_jᵀ
        ds = p * (dp - D[:, None])  # S̄_ij
        dk += tl.dot(tl.trans(ds), q)  # K̄_j += S̄_ijᵀ Q_i; the scale waits for the store
    tl.store(DK_ptr + base + keys[:, None] * stride_t + cols[None, :] * stride_e, dk * sm_scale, mask=kv_mask)
    tl.store(DV_ptr + base + keys[:, None] * stride_t + cols[None, :] * stride_e, dv, mask=kv_mask)
