# Hostile: a character device (the one /dev/zero is, an endless stream) where the notebook should be: refused from its file type, never opened.
# assignment: 01_matmul_from_shapes
# delivery: device
# needs: root (mknod)
# expect: * zero - unsafe file
