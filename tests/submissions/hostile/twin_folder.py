# Hostile: a folder "twin" and a zip "twin.zip" in one class: one id, two submissions. Neither is graded, both are named in the reason; never merged, never one chosen silently.
# assignment: 01_matmul_from_shapes
# name: twin
# expect: * zero - duplicate student
