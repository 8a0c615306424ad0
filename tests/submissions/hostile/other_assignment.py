# Hostile: the right file name, but the notebook of another assignment (a solved one).
# assignment: 01_matmul_from_shapes
# expect: * zero - wrong assignment
# %% notebook:00_vjp_contract
