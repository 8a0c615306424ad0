"""Reference Triton solutions: each op's forward and backward kernels behind a torch.autograd.Function.

One op per module (``kernels/softmax.py``, ``kernels/layer_norm.py``, ...); the
notebooks' graders compare students' kernels against these. Filled op by op.
"""
