"""One hidden check per exercise: ``check.<function>(student_fn)`` raises on a wrong answer."""

from .matmul import linear_backward, linear_bias_backward, reduce_to_shape
from .vjp_contract import linear_softmax_ce_backward, numerical_gradient, relative_error
from .softmax import softmax_backward, softmax_cross_entropy_backward, softmax_jacobian
from .triton_softmax import TritonSoftmax, softmax_bwd_kernel, softmax_fwd_kernel, triton_softmax
