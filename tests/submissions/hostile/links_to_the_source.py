# Hostile: the submission is a symbolic link to the instructor's source notebook, the solution (it once got 7/7). A link is never followed.
# assignment: 01_matmul_from_shapes
# delivery: symlink @@COURSE@@/source/@@ASSIGNMENT@@/@@ASSIGNMENT@@.ipynb
# expect: * zero - unsafe file
