# Hostile: a notebook file that is not JSON at all (the upload was cut short).
# assignment: 01_matmul_from_shapes
# expect: * zero - malformed notebook
# %% raw
{"cells": [{"cell_type": "code", "source": "def linear_backward(x, w, dy):\n
