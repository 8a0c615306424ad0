"""kernels.roofline: the floors a GPU run is judged against follow from bytes, FLOPs and the datasheet peaks."""

from __future__ import annotations

import pytest

from kernels import roofline


def test_row_ops_are_memory_bound_and_attention_and_linear_compute_bound_on_every_gpu():
    for cost in roofline.costs():
        for peak in roofline.PEAKS:
            _, bound = roofline.seconds(cost, peak, backward=True)
            assert bound == ("compute" if cost.op.startswith(("attention", "linear")) else "memory"), (cost.op, peak.name)


def test_a_memory_bound_floor_is_the_bytes_over_the_bandwidth():
    softmax = next(c for c in roofline.costs() if c.op == "softmax" and c.shape == "4096×8192")
    assert softmax.fwd_bwd_bytes == 5 * 4096 * 8192 * 2  # read x; read y, ȳ; write y, x̄ — bf16
    h200 = next(p for p in roofline.PEAKS if p.name == "H200 SXM")
    assert roofline.seconds(softmax, h200, backward=True)[0] == pytest.approx(softmax.fwd_bwd_bytes / 4.8e12)


def test_causal_attention_does_half_the_flops_and_moves_the_same_bytes():
    full, causal = (next(c for c in roofline.costs() if c.op == name and "D128" in c.shape)
                    for name in ("attention", "attention causal"))
    assert causal.fwd_flops == full.fwd_flops / 2 and causal.fwd_bwd_bytes == full.fwd_bwd_bytes
    assert full.fwd_bwd_flops == 3.5 * full.fwd_flops  # backward 2.5× the forward


def test_the_markdown_table_has_a_row_per_cost_and_a_column_per_gpu():
    lines = roofline.markdown().splitlines()
    assert len(lines) == 2 + len(roofline.costs())
    assert all(line.count("|") == 5 + len(roofline.PEAKS) for line in lines)


def test_linear_does_three_gemms_and_reads_each_operand_once_per_gemm():
    cost = roofline.linear(8192, 4096, 4096)
    assert cost.fwd_flops == 2 * 8192 * 4096 * 4096 and cost.fwd_bwd_flops == 3 * cost.fwd_flops
    x, w, y = 8192 * 4096 * 2, 4096 * 4096 * 2, 8192 * 4096 * 2  # bf16
    assert cost.fwd_bytes == x + w + y and cost.fwd_bwd_bytes == 3 * (x + w + y)
    h100 = next(p for p in roofline.PEAKS if p.name == "H100 SXM")
    assert roofline.seconds(cost, h100, backward=True) == (pytest.approx(cost.fwd_bwd_flops / 989e12), "compute")


def test_swiglu_and_rope_count_each_tensor_once_per_pass():
    swiglu = next(c for c in roofline.costs() if c.op == "swiglu")
    assert swiglu.fwd_bytes == 3 * 8192 * 14336 * 2  # read a, b; write h — bf16
    assert swiglu.fwd_bwd_bytes == 8 * 8192 * 14336 * 2  # + read a, b, h̄; write ā, b̄
    rope = roofline.rope(4, 4096, 32, 128)
    x, table = 4 * 4096 * 32 * 128 * 2, 2 * 4096 * 64 * 4  # x in bf16; cos and sin (T, D/2) in float32
    assert rope.fwd_bytes == 2 * x + table and rope.fwd_bwd_bytes == 2 * rope.fwd_bytes  # the backward is a forward
    h100 = next(p for p in roofline.PEAKS if p.name == "H100 SXM")
    assert roofline.seconds(rope, h100, backward=True) == (pytest.approx(rope.fwd_bwd_bytes / 3.35e12), "memory")
