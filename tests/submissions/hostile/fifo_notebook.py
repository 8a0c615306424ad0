# Hostile: a named pipe where the notebook should be. Opened to be read, it would block the grader forever (it stopped the whole class); it is refused from its file type, never opened.
# assignment: 01_matmul_from_shapes
# delivery: fifo
# expect: * zero - unsafe file
