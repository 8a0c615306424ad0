# Hostile: a zip whose member has the absolute path of the instructor's source notebook. Refused from the zip's directory; nothing is unpacked.
# assignment: 01_matmul_from_shapes
# delivery: zip
# member: @@ASSIGNMENT@@.ipynb
# member: @@COURSE@@/source/@@ASSIGNMENT@@/@@ASSIGNMENT@@.ipynb text {}
# expect: * zero - unsafe archive
