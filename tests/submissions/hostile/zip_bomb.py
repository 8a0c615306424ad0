# Hostile: a zip of a few hundred KB that unpacks a 200 MiB file beside the notebook. Refused from the sizes its directory declares, before anything is unpacked.
# assignment: 01_matmul_from_shapes
# delivery: zip
# member: @@ASSIGNMENT@@.ipynb
# member: big.bin zeros 209715200
# expect: * zero - archive too large
