"""Reference Triton solutions: each op's forward and backward kernels behind a torch.autograd.Function.

One op per module (``kernels/softmax.py``, ...), each in three layers: ``@triton.jit``
kernels, host functions that check inputs, allocate and launch, and a thin autograd
Function exported as a plain function. The notebooks' graders compare students'
kernels against these.

Importing applies the course's device rule itself (``kernels/_device.py``), before any
kernel is defined: without CUDA it sets TRITON_INTERPRET=1, so every op runs on CPU tensors
(float16, float32, float64) in Triton's interpreter; with CUDA it changes nothing. TRITON_INTERPRET set
beforehand is kept: ``1`` interprets even on a GPU machine, ``0`` keeps the kernels compiled
(the compile check below sets it). ``kernels.DEVICE_CHOICE`` says what was decided and why.

``python -m kernels.compile_check`` compiles every kernel here and in notebooks 03–11 for
sm_75 (T4), sm_86 (RTX 3090 / A10), sm_89 (L4 / RTX 4090), sm_80, sm_90 and gfx942 at GPU-sized
shapes, without a GPU, and fails on spills, shared memory over a target's limit and int32 offset
overflows.
"""

from ._device import DeviceChoice, device_choice

# Decide before any op module is imported: Triton reads TRITON_INTERPRET at @triton.jit time.
DEVICE_CHOICE: DeviceChoice = device_choice()

from .attention import attention, attention_varlen  # noqa: E402
from .cross_entropy import cross_entropy  # noqa: E402
from .embedding import embedding  # noqa: E402
from .fused_linear_cross_entropy import fused_linear_cross_entropy  # noqa: E402
from .layer_norm import layer_norm  # noqa: E402
from .linear import linear  # noqa: E402
from .rms_norm import rms_norm  # noqa: E402
from .rope import rope  # noqa: E402
from .scatter_add import scatter_add  # noqa: E402
from .softmax import softmax  # noqa: E402
from .swiglu import swiglu  # noqa: E402

__all__ = ["attention", "attention_varlen", "cross_entropy", "embedding", "fused_linear_cross_entropy", "layer_norm", "linear", "rms_norm",
           "rope", "scatter_add", "softmax", "swiglu"]
