# Hostile: the student's folder is a symbolic link to the instructor's source folder, which holds the solution. A link is never entered.
# assignment: 01_matmul_from_shapes
# delivery: folder-symlink @@COURSE@@/source/@@ASSIGNMENT@@
# expect: * zero - unsafe file
