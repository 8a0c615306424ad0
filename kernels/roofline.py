"""What each reference op should cost on a real GPU: bytes, FLOPs, and the time they imply at the peaks.

    python -m kernels.roofline              # a markdown table for kernels/BENCHMARKS.md
    python -m kernels.roofline --json

For each op at the benchmark shapes (the compile check's grid, bfloat16), the bytes one call
must move through DRAM (the minimum: every input read once, every output written once, as
``kernels.bench`` counts them for GB/s) and the FLOPs it must do, forward and forward +
backward; then, for each GPU, the time the slower of the two takes at that GPU's peak:
``max(bytes / bandwidth, FLOPs / compute)``. That is the floor a GPU run is judged against
(``kernels.bench`` reports the fraction of it reached); nothing here is measured.

Peaks are the vendors' datasheet figures, dense (no sparsity): HBM bandwidth, and bf16
tensor-core throughput for the matmul FLOPs of attention and linear. The row-wise ops' FLOPs (a few per
element: max, exp, sums, scales) run on the vector units; at these shapes their time at even
a tenth of the tensor-core peak is far under their memory time, so they are memory-bound and
their FLOPs are shown, not used.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    name: str
    target: str  # the compile check's target for this GPU
    bandwidth: float  # bytes per second (HBM)
    bf16_flops: float  # dense bf16 tensor-core FLOP/s


# Datasheets: NVIDIA A100 80GB SXM, H100 SXM5, H200 SXM; AMD Instinct MI300X.
PEAKS = (
    Peak("A100 80GB SXM", "sm_80", 2.039e12, 312e12),
    Peak("H100 SXM", "sm_90", 3.35e12, 989e12),
    Peak("H200 SXM", "sm_90", 4.8e12, 989e12),
    Peak("MI300X", "gfx942", 5.3e12, 1307e12),
)

BF16 = 2  # bytes per element


@dataclass(frozen=True)
class Cost:
    op: str
    shape: str
    fwd_bytes: int
    fwd_bwd_bytes: int
    fwd_flops: float
    fwd_bwd_flops: float
    matmul: bool  # the FLOPs run on tensor cores (they can bound the time), or on the vector units (they cannot)


def row_op(op: str, m: int, n: int, fwd_per_elem: int, bwd_per_elem: int, fwd_rw: int, fwd_bwd_rw: int) -> Cost:
    """A row-wise op on (m, n): bytes as ``kernels.bench`` counts them, FLOPs a few per element."""
    return Cost(op, f"{m}×{n}", fwd_rw * m * n * BF16, fwd_bwd_rw * m * n * BF16,
                fwd_per_elem * m * n, (fwd_per_elem + bwd_per_elem) * m * n, matmul=False)


def attention(b: int, h: int, t: int, d: int, causal: bool, h_kv: int | None = None) -> Cost:
    """FlashAttention, each tensor once: the forward reads q, k, v and writes o and L; the backward reads q, k, v,
    o, ȳ and L, writes and reads D, writes q̄, k̄, v̄. With grouped-query attention k, v, k̄ and v̄ have H_kv heads
    (default H): G = H / H_kv times fewer bytes, the same FLOPs. FLOPs: 4·B·H·T²·D forward, halved when causal,
    and 2.5× that in the backward (``kernels.bench``'s count)."""
    h_kv = h if h_kv is None else h_kv
    queries = b * h * t * d * BF16  # q, o, ȳ, q̄ each
    keys = b * h_kv * t * d * BF16  # k, v, k̄, v̄ each
    row = b * h * t * 4  # L and D: float32, one per query row
    flops = 4 * b * h * t * t * d * (0.5 if causal else 1.0)
    forward = 2 * queries + 2 * keys + row
    backward = 4 * queries + 4 * keys + 3 * row
    heads = f"H{h}" if h_kv == h else f"H{h}/{h_kv}"
    return Cost("attention" + (" causal" if causal else ""), f"B{b}·{heads}·T{t}·D{d}", forward, forward + backward,
                flops, 3.5 * flops, matmul=True)


def linear(m: int, k: int, n: int) -> Cost:
    """y = x w for x (m, k), w (k, n): each GEMM reads its two operands once and writes its result once.
    Forward y (read x, w; write y); backward x̄ = ȳ wᵀ (read ȳ, w; write x̄) and w̄ = xᵀ ȳ (read x, ȳ; write w̄).
    2·m·k·n FLOPs per GEMM, three in all; b̄ (a column sum of ȳ, fused into w̄'s read) adds no traffic."""
    x, w, y = m * k * BF16, k * n * BF16, m * n * BF16
    forward = x + w + y
    backward = (y + w + x) + (x + y + w)
    flops = 2 * m * k * n
    return Cost("linear", f"M{m}·K{k}·N{n}", forward, forward + backward, flops, 3 * flops, matmul=True)


def rope(b: int, t: int, h: int, d: int) -> Cost:
    """RoPE on x (B, T, H, D): the forward reads x and writes y, the backward reads ȳ and writes x̄ (the same kernel),
    each pass reading cos and sin ((T, D/2) float32 each) once. Three FLOPs per output element (two products, a sum)."""
    x = b * t * h * d * BF16
    table = 2 * t * (d // 2) * 4
    forward = 2 * x + table
    return Cost("rope", f"B{b}·T{t}·H{h}·D{d}", forward, 2 * forward, 3 * b * t * h * d, 6 * b * t * h * d, matmul=False)


def costs() -> list[Cost]:
    """The benchmark shapes of the compile check's full grid, in bfloat16."""
    out = []
    for n in (1024, 8192, 32768):
        # softmax: max, sub, exp, sum, div forward; ⟨y, ȳ⟩ and y(ȳ − s) backward
        out.append(row_op("softmax", 4096, n, 5, 4, 2, 5))
    for n in (1024, 8192, 16384):
        # layer norm: mean, var, normalise, scale and shift; the backward's c1, c2 and x̄, plus γ̄, β̄
        out.append(row_op("layer_norm", 4096, n, 8, 12, 2, 5))
        out.append(row_op("rms_norm", 4096, n, 5, 9, 2, 5))
    out.append(row_op("cross_entropy", 8192, 128256, 5, 3, 1, 3))
    for d in (64, 128, 256):
        for causal in (False, True):
            out.append(attention(4, 16, 4096, d, causal))
    for causal in (False, True):  # Llama-3-8B's grouped-query heads: 32 for queries, 8 for keys and values
        out.append(attention(4, 32, 4096, 128, causal, h_kv=8))
    for m, k, n in ((8192, 4096, 4096), (8192, 4096, 14336)):
        out.append(linear(m, k, n))
    # swiglu: σ (exp, add, divide) and two products forward; σ again and the two gradients' products backward.
    # Reads a, b, writes h; then reads a, b, h̄ and writes ā, b̄.
    out.append(row_op("swiglu", 8192, 14336, 5, 10, 3, 8))
    out.append(rope(4, 4096, 32, 128))  # Llama-3-8B's queries
    return out


def seconds(cost: Cost, peak: Peak, backward: bool) -> tuple[float, str]:
    """The floor of one call on ``peak``'s GPU and what sets it ("memory" or "compute")."""
    nbytes = cost.fwd_bwd_bytes if backward else cost.fwd_bytes
    flops = cost.fwd_bwd_flops if backward else cost.fwd_flops
    memory = nbytes / peak.bandwidth
    compute = flops / peak.bf16_flops if cost.matmul else 0.0
    return (compute, "compute") if compute > memory else (memory, "memory")


def _human(x: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def markdown() -> str:
    head = ["op", "shape (bf16)", "bytes fwd / fwd+bwd", "FLOPs fwd / fwd+bwd"]
    head += [f"{p.name} fwd+bwd ({p.target})" for p in PEAKS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in costs():
        cells = [c.op, c.shape, f"{_human(c.fwd_bytes, 'B')} / {_human(c.fwd_bwd_bytes, 'B')}",
                 f"{_human(c.fwd_flops, 'FLOP')} / {_human(c.fwd_bwd_flops, 'FLOP')}" + ("" if c.matmul else " (vector)")]
        for p in PEAKS:
            s, bound = seconds(c, p, backward=True)
            cells.append(f"{s * 1e6:.1f} µs ({bound})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="the figures as JSON instead of a markdown table")
    args = parser.parse_args(argv)
    if args.json:
        print(json.dumps([{**c.__dict__, **{f"{p.name}_fwd_bwd_s": seconds(c, p, True)[0] for p in PEAKS},
                           **{f"{p.name}_fwd_s": seconds(c, p, False)[0] for p in PEAKS}} for c in costs()], indent=2))
    else:
        print(markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
