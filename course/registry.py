"""Every exercise of the course, in one place (docs/design.md, "Adding an exercise").

An exercise's name is the student's function, its cells' grade_id and the name of both its checks:
``course.selfcheck.<name>`` (the visible check, from the lesson module ``visible``) and
``autograder.check.<name>`` (the hidden one, from ``hidden``). Its hints map a failure's topic, else its
class, else ``"*"`` to the number of the notebook hint that covers it. Data only: nothing here imports a
lesson until :func:`checks` is called.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

SPECS = ("pytorch-function", "triton-kernel", "autograd-function")
FN, KERNEL, FUNCTION = SPECS


@dataclass(frozen=True)
class Entry:
    """One exercise (``course.spec`` declares how it is checked)."""

    name: str
    notebook: str  # the assignment: its folder under source/ and its notebook's name
    spec: str  # one of SPECS
    points: int  # the test cell's nbgrader points
    hints: dict[str, int]
    visible: str  # the module under course.selfcheck that defines the visible check
    hidden: str  # the module under autograder.check that defines the hidden check


def _lesson(notebook: str, visible: str, hidden: str, *rows: tuple) -> list[Entry]:
    """Rows of (name, spec, points, hints[, visible module]) of one notebook, in notebook order."""
    return [Entry(name, notebook, spec, points, hints, *rest or (visible,), hidden)
            for name, spec, points, hints, *rest in rows]


EXERCISES: tuple[Entry, ...] = (
    *_lesson(
        "00_vjp_contract", "vjp_contract", "vjp_contract",
        # "procedure": a right formula applied in the wrong way (entries moved together, the caller's x
        # changed, float32 in or out), which Hint 2's loop covers, not the Taylor series of Hint 1.
        ("numerical_gradient", FN, 2, {"shape": 2, "non-finite": 2, "procedure": 2, "*": 1}),
        ("relative_error", FN, 1, {"shape": 2, "non-finite": 2, "*": 1}),
        # "head": the loss of z taken wrongly (its sign, its mean, the softmax left out), Hint 1; "pullback": the
        # linear stage's scalar, Hint 2; "one-sided": the differences themselves, Part A.
        ("linear_softmax_ce_backward", FN, 3, {"scale": 1, "sign": 1, "head": 1, "one-sided": 1, "pullback": 2,
                                               "*": 3}),
        # "through-x": σ′ applied to y as if it were x, Hint 3; "no-dy": the diagonal without ȳ, Hint 1.
        ("sigmoid_backward", FN, 2, {"through-x": 3, "no-dy": 1, "shape": 1, "*": 2}),
    ),
    *_lesson(
        "01_matmul_from_shapes", "matmul", "matmul",
        ("linear_backward", FN, 3, {"batch-reduction": 2, "scale": 2, "*": 1}),
        ("linear_bias_backward", FN, 2, {"broadcast-axis": 2, "shape": 2, "*": 1}),
        ("reduce_to_shape", FN, 2, {"shape": 2, "*": 1}),
        ("name_the_bug", FN, 2, {"shape": 1, "*": 2}),
        ("batched_matmul_backward", FN, 2, {"batch-reduction": 1, "shape": 1, "*": 2}),
    ),
    *_lesson(
        "02_softmax_collapse", "softmax", "softmax",
        ("softmax_jacobian", FN, 1, {"wrong-values": 2, "sign": 2, "broadcast-axis": 3, "shape": 3, "*": 2}),
        ("softmax_backward", FN, 3, {"materialized-jacobian": 1, "autograd-in-backward": 1, "wrong-values": 2,
                                     "sign": 2, "scale": 2, "broadcast-axis": 3, "batch-reduction": 3, "shape": 3,
                                     "*": 2}),
        ("shifted_softmax_vjp", FN, 2, {"non-finite": 2, "broadcast-axis": 2, "wrong-values": 3, "sign": 3,
                                        "shape": 3, "batch-reduction": 3, "*": 4}),
        ("softmax_cross_entropy_backward", FN, 2, {"wrong-values": 2, "non-finite": 2, "autograd-in-backward": 2,
                                                   "scale": 3, "batch-reduction": 3, "broadcast-axis": 3, "shape": 3,
                                                   "*": 4}),
        ("log_softmax_backward", FN, 2, {"materialized-jacobian": 1, "autograd-in-backward": 1, "wrong-values": 2,
                                         "sign": 2, "scale": 2, "broadcast-axis": 3, "batch-reduction": 3,
                                         "shape": 3, "*": 2}),
    ),
    *_lesson(
        "03_triton_fused_softmax", "triton_softmax", "triton_softmax",
        # A kernel's failure met while checking TritonSoftmax or triton_softmax carries the kernel's class: Hint 1
        # of those two says its Part's hints cover it.
        # "race" and "out-of-bounds" (course.sanitizer): a kernel's masks and row strides, Hint 2 of each kernel.
        ("softmax_fwd_kernel", KERNEL, 2, {"non-finite": 2, "wrong-values": 2, "shape": 2, "half-accumulation": 3,
                                           "out-of-bounds": 2, "race": 2, "*": 2}),
        ("softmax_bwd_kernel", KERNEL, 2, {"wrong-values": 1, "sign": 1, "non-finite": 2, "shape": 2,
                                           "half-accumulation": 3, "out-of-bounds": 2, "race": 2, "*": 2}),
        ("TritonSoftmax", FUNCTION, 2, {"wrong-values": 1, "autograd-in-backward": 1, "non-finite": 1, "sign": 1,
                                        "out-of-bounds": 1, "race": 1, "*": 2}),
        # "race": rows lined up as a view of a transposed x overlap in memory, Hint 2.
        ("triton_softmax", FN, 1, {"broadcast-axis": 1, "non-finite": 1, "sign": 1, "shape": 3, "wrong-values": 2,
                                   "out-of-bounds": 1, "race": 2, "*": 2}),
    ),
    *_lesson(
        "04_layernorm", "layernorm", "layernorm",
        ("layernorm_forward", FN, 1, {"shape": 1, "broadcast-axis": 1, "wrong-values": 2, "*": 2}),
        ("layernorm_backward", FN, 3, {"shape": 1, "wrong-values": 1, "broadcast-axis": 3, "batch-reduction": 4,
                                       "scale": 3, "*": 3}),
        ("rmsnorm_backward", FN, 2, {"shape": 2, "wrong-values": 1, "broadcast-axis": 2, "batch-reduction": 2,
                                     "*": 2}),
        # "out-of-bounds": the lanes past the row, Hint 2; "race": partial rows shared by programs, Hint 3.
        ("TritonLayerNorm", FUNCTION, 2, {"wrong-values": 2, "non-finite": 2, "batch-reduction": 3,
                                          "half-accumulation": 4, "out-of-bounds": 2, "race": 3, "*": 3}),
        # "out-of-bounds": a γ of the wrong length read past its end, Hint 3.
        ("triton_layernorm", FN, 1, {"shape": 1, "out-of-bounds": 3, "race": 1, "*": 1}),
    ),
    *_lesson(
        "05_attention_recompute", "attention", "attention",
        ("ManualAttention", FUNCTION, 3, {"shape": 1, "transpose": 3, "scale": 3, "broadcast-axis": 2,
                                          "batch-reduction": 2, "sign": 2, "autograd-in-backward": 3, "*": 3}),
        ("manual_attention", FN, 1, {"*": 1}),
        ("attention_forward_lse", FN, 2, {"saved-quadratic-tensor": 2, "untiled": 2, "scale": 2, "shape": 2,
                                          "autograd-in-backward": 2, "*": 3}),
        ("attention_backward_recompute", FN, 3, {"saved-quadratic-tensor": 2, "untiled": 2, "row-scalar": 1,
                                                 "scale": 2, "transpose": 3, "batch-reduction": 2,
                                                 "autograd-in-backward": 2, "shape": 2, "*": 3}),
        ("RecomputeAttention", FUNCTION, 2, {"saved-quadratic-tensor": 1, "*": 2}),
        ("recompute_attention", FN, 1, {"*": 1}),
        # "out-of-bounds" and "race": which lanes are data, and the strides, Hint 1 of each kernel ("race" in the
        # forward: its rows of O go where its rows of Q came from, Hint 2).
        ("attention_delta_kernel", KERNEL, 2, {"non-finite": 1, "wrong-values": 2, "out-of-bounds": 1, "race": 1,
                                               "*": 3}),
        ("flash_fwd_kernel", KERNEL, 2, {"non-finite": 1, "wrong-values": 2, "scale": 2, "out-of-bounds": 1,
                                         "race": 2, "*": 3}),
        ("flash_bwd_dkdv_kernel", KERNEL, 3, {"non-finite": 1, "wrong-values": 2, "scale": 2, "out-of-bounds": 1,
                                              "race": 1, "*": 3}),
    ),
    *_lesson(
        "06_topk_routing", "routing", "routing",
        ("topk_backward", FN, 2, {"non-atomic-scatter": 2, "shape": 1, "wrong-values": 1, "batch-reduction": 1,
                                  "*": 1}),
        ("embedding_backward", FN, 2, {"non-atomic-scatter": 2, "batch-reduction": 2, "shape": 1, "*": 1}),
        ("relu_backward", FN, 1, {"wrong-values": 2, "*": 1}),
        ("maxpool1d_backward", FN, 2, {"non-atomic-scatter": 2, "batch-reduction": 1, "wrong-values": 3, "*": 1}),
        ("dropout_backward", FN, 1, {"scale": 1, "*": 2}),
        ("moe_gate_backward", FN, 3, {"shape": 1, "wrong-values": 2, "sign": 2, "*": 1}),
        # "race": the read-add-store of two programs, Hint 2 (on a GPU, where nothing is recorded, the values may show
        # it as "non-atomic-scatter"); "out-of-bounds": the masked tail, Hint 1.
        ("scatter_add_kernel", KERNEL, 2, {"race": 2, "non-atomic-scatter": 2, "out-of-bounds": 1, "wrong-values": 1,
                                           "*": 1}),
    ),
    *_lesson(
        "07_fused_linear_cross_entropy", "lm_head", "lm_head",
        ("linear_ce_backward", FN, 3, {"scale": 1, "ignored": 1, "transpose": 2, "non-finite": 3, "*": 1}),
        ("chunked_linear_ce", FN, 3, {"materialized-logits": 3, "batch-reduction": 3, "chunks": 3, "scale": 2,
                                      "ignored": 2, "*": 1}),
        ("vocab_blocked_lse", FN, 2, {"materialized-logits": 3, "delegated-to-library": 3, "blocks": 2,
                                      "non-finite": 2, "*": 1}),
        # Part D's hints: 1 — the two walks over the row; 2 — n, the ignored rows and the dtype; 3 — the code.
        ("ce_grad_kernel", KERNEL, 2, {"scale": 2, "ignored": 2, "float32": 2, "non-finite": 1, "sign": 1,
                                       "out-of-bounds": 3, "race": 3, "*": 3}, "ce_grad"),
    ),
    *_lesson(
        "08_mixed_precision_backward", "mixed_precision", "mixed_precision",
        ("softmax_backward_mixed", FN, 2, {"half-accumulation": 2, "dtype": 2, "float32": 2, "*": 1}),
        ("layernorm_backward_mixed", FN, 3, {"half-accumulation": 2, "dtype": 2, "float32": 2, "*": 1}),
        ("grad_tolerance", FN, 2, {"dtype": 1, "length": 2, "tight": 2, "loose": 2, "condition": 3, "*": 1}),
        # A plain class, not an autograd.Function: made and called like a function (its methods are the checks').
        ("DynamicLossScaler", FN, 2, {"unscale": 1, "skip": 2, "growth": 2, "backoff": 2, "*": 3}),
        ("softmax_bwd_mixed_kernel", KERNEL, 2, {"half-accumulation": 2, "float32": 2, "out-of-bounds": 1, "race": 1,
                                                 "*": 1}, "mixed_kernel"),
    ),
    *_lesson(
        "09_matmul_backward_triton", "linear_triton", "linear_triton",
        # Each kernel's hints (the notebook's): 1 — which program does what, its masks and where it writes (out of
        # bounds, races; for the split kernels, which rows a split owns); 2 — the operands' layout and the sums'
        # dtype; 3 — the loop's skeleton. "split-end": a split's last step reads the next split's rows.
        ("linear_dx_kernel", KERNEL, 3, {"out-of-bounds": 1, "race": 1, "non-finite": 1, "transpose": 2,
                                         "half-accumulation": 2, "float32": 2, "scale": 3, "wrong-values": 3,
                                         "*": 3}),
        ("linear_dw_splitk_kernel", KERNEL, 3, {"split-end": 1, "batch-reduction": 1, "race": 1, "out-of-bounds": 1,
                                                "non-finite": 1, "transpose": 2, "half-accumulation": 2,
                                                "float32": 2, "wrong-values": 3, "*": 3}),
        ("linear_dw_atomic_kernel", KERNEL, 2, {"race": 1, "out-of-bounds": 1, "non-finite": 1, "transpose": 2,
                                                "half-accumulation": 2, "float32": 2, "batch-reduction": 3,
                                                "split-end": 3, "wrong-values": 3, "*": 3}),
        # Hint 1: the forward and what to save ("saved"); Hint 2: the backward's products and the second pass (a
        # kernel's failure met here carries the kernel's class and names its Part); Hint 3: shapes and layouts.
        ("TritonLinear", FUNCTION, 2, {"saved": 1, "out-of-bounds": 2, "race": 2, "half-accumulation": 2,
                                       "transpose": 2, "scale": 2, "batch-reduction": 2, "wrong-values": 2,
                                       "non-finite": 2, "autograd-in-backward": 2, "shape": 3, "*": 2}),
    ),
    *_lesson(
        "10_attention_as_trained", "attention_trained", "attention_trained",
        # Each kernel's hints (the notebook's): 1 — the walk (which tiles a program visits, where it starts and
        # stops, the K/V slab of a query head, the masks against T or the document): "walk" (a tile skipped that
        # holds visible keys), "dense-walk" (tiles the mask hides entirely visited), out of bounds, races;
        # 2 — the mask on the diagonal tile ("diagonal"), P rebuilt under it, the group's sum (Part C), the
        # document's boundary (Part D); 3 — a small case by hand.
        ("causal_fwd_kernel", KERNEL, 2, {"walk": 1, "dense-walk": 1, "out-of-bounds": 1, "race": 1, "diagonal": 2,
                                          "non-finite": 2, "float32": 3, "wrong-values": 3, "*": 3}),
        ("causal_bwd_dq_kernel", KERNEL, 2, {"walk": 1, "dense-walk": 1, "out-of-bounds": 1, "race": 1,
                                             "non-finite": 1, "diagonal": 2, "float32": 2, "wrong-values": 3,
                                             "*": 3}),
        ("causal_bwd_dkdv_kernel", KERNEL, 3, {"walk": 1, "dense-walk": 1, "out-of-bounds": 1, "non-finite": 1,
                                               "diagonal": 1, "race": 2, "batch-reduction": 2, "float32": 3,
                                               "wrong-values": 3, "*": 3}),
        ("varlen_fwd_kernel", KERNEL, 2, {"dense-walk": 1, "out-of-bounds": 1, "race": 2, "boundary": 2,
                                          "diagonal": 2, "non-finite": 2, "float32": 3, "wrong-values": 3, "*": 3}),
    ),
    *_lesson(
        "11_mlp_and_rope", "mlp_rope", "mlp_rope",
        # gelu_backward: 1 — the product x·Φ(x) and Φ' ("product": a term of the product rule missing); 2 — the
        # tanh form through the chain ("form": the other form's derivative); 3 — by hand.
        ("gelu_backward", FN, 2, {"product": 1, "shape": 1, "form": 2, "wrong-values": 3, "*": 3}),
        # swiglu_backward: 1 — which factor each input touches ("swapped", "factor"); 2 — silu' from σ' and from
        # which tensor ("wrong-tensor", "derivative"); 3 — by hand at a = 0.
        ("swiglu_backward", FN, 2, {"swapped": 1, "factor": 1, "shape": 1, "wrong-tensor": 2, "derivative": 2,
                                    "wrong-values": 3, "*": 3}),
        # Each kernel's hints (the notebook's): 1 — programs, masks, where it writes (out of bounds, races);
        # swiglu_bwd_kernel: 2 — the dtypes (half-accumulation, float32), 3 — the body's steps (its named bugs);
        # rope_kernel: 2 — the pair indices per layout ("layout"), 3 — what BACKWARD changes ("transpose").
        ("swiglu_bwd_kernel", KERNEL, 3, {"out-of-bounds": 1, "race": 1, "non-finite": 1, "half-accumulation": 2,
                                          "float32": 2, "swapped": 3, "factor": 3, "wrong-tensor": 3,
                                          "derivative": 3, "wrong-values": 3, "*": 3}),
        # rope_backward: 1 — a pair's Jacobian is R(θ), the VJP multiplies by Rᵀ; 2 — what Rᵀ is ("transpose")
        # and which elements pair in each layout ("layout"); 3 — by hand at θ = 90°.
        ("rope_backward", FN, 2, {"sign": 1, "shape": 1, "transpose": 2, "layout": 2, "wrong-values": 3, "*": 3}),
        # A rope_kernel right only to float32 precision reads its loads (hint 1): the plan has no dtype hint.
        ("rope_kernel", KERNEL, 3, {"out-of-bounds": 1, "race": 1, "non-finite": 1, "wrong-values": 1, "float32": 1,
                                    "layout": 2, "transpose": 3, "*": 1}),
    ),
)
BY_NAME = {exercise.name: exercise for exercise in EXERCISES}
NOTEBOOKS = tuple(dict.fromkeys(exercise.notebook for exercise in EXERCISES))


def exercises_of(notebook: str) -> list[str]:
    """The names of the notebook's exercises, in its order."""
    return [exercise.name for exercise in EXERCISES if exercise.notebook == notebook]


def hints_of(name: str) -> dict[str, int]:
    """The hint table of exercise ``name``; empty for a name that is no exercise."""
    exercise = BY_NAME.get(name)
    return exercise.hints if exercise else {}


def checks(package: str, side: str) -> dict[str, Callable]:
    """Every exercise's check from ``package``'s lesson modules: ``side`` is "visible" (``course.selfcheck``)
    or "hidden" (``autograder.check``, which passes its own name: course never imports the grader)."""
    modules = {m: importlib.import_module(f"{package}.{m}") for m in sorted({getattr(e, side) for e in EXERCISES})}
    return {e.name: getattr(modules[getattr(e, side)], e.name) for e in EXERCISES}
