"""Reference Triton solutions: each op's forward and backward kernels behind a torch.autograd.Function.

One op per module (``kernels/softmax.py``, ...), each in three layers: ``@triton.jit``
kernels, host functions that check inputs, allocate and launch, and a thin autograd
Function exported as a plain function. The notebooks' graders compare students'
kernels against these. Import ``course`` (or set TRITON_INTERPRET=1) first on a
machine without CUDA.

``python -m kernels.compile_check`` compiles every kernel here and in notebooks 03–06 for
sm_80, sm_90 and gfx942 at GPU-sized shapes, without a GPU, and fails on spills, shared
memory over a target's limit and int32 offset overflows.
"""

from .attention import attention
from .cross_entropy import cross_entropy
from .embedding import embedding
from .layer_norm import layer_norm
from .rms_norm import rms_norm
from .scatter_add import scatter_add
from .softmax import softmax

__all__ = ["attention", "cross_entropy", "embedding", "layer_norm", "rms_norm", "scatter_add", "softmax"]
