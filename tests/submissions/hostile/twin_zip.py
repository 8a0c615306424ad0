# Hostile: the zip half of twin_folder: "twin.zip" beside the folder "twin".
# assignment: 01_matmul_from_shapes
# name: twin
# delivery: zip
# expect: * zero - duplicate student
