"""One hidden check per exercise: ``check.<function>(student_fn)`` raises on a wrong answer."""

from .attention import (
    ManualAttention,
    RecomputeAttention,
    attention_backward_recompute,
    attention_delta_kernel,
    attention_forward_lse,
    flash_bwd_dkdv_kernel,
    flash_fwd_kernel,
    manual_attention,
    recompute_attention,
)
from .layernorm import TritonLayerNorm, layernorm_backward, layernorm_forward, rmsnorm_backward, triton_layernorm
from .lm_head import ce_grad_kernel, chunked_linear_ce, linear_ce_backward, vocab_blocked_lse
from .matmul import batched_matmul_backward, linear_backward, linear_bias_backward, name_the_bug, reduce_to_shape
from .mixed_precision import (
    DynamicLossScaler,
    grad_tolerance,
    layernorm_backward_mixed,
    softmax_backward_mixed,
    softmax_bwd_mixed_kernel,
)
from .routing import (
    dropout_backward,
    embedding_backward,
    maxpool1d_backward,
    moe_gate_backward,
    relu_backward,
    scatter_add_kernel,
    topk_backward,
)
from .softmax import (
    log_softmax_backward,
    shifted_softmax_vjp,
    softmax_backward,
    softmax_cross_entropy_backward,
    softmax_jacobian,
)
from .triton_softmax import TritonSoftmax, softmax_bwd_kernel, softmax_fwd_kernel, triton_softmax
from .vjp_contract import linear_softmax_ce_backward, numerical_gradient, relative_error, sigmoid_backward
