"""Visible self-checks: what each notebook's test cell runs before its hidden block.

They use small fixed inputs at batch 1 and batch 7 and the same classifier as the
hidden checks, so a student sees the same ``diagnosis:`` line before submitting.
References come from torch's own autograd or from closed forms, never from a solution.
"""

from .matmul import linear_backward, linear_bias_backward, reduce_to_shape
from .vjp_contract import linear_softmax_ce_backward, numerical_gradient, relative_error
from .softmax import softmax_backward, softmax_cross_entropy_backward, softmax_jacobian
from .triton_softmax import TritonSoftmax, softmax_bwd_kernel, softmax_fwd_kernel, triton_softmax
