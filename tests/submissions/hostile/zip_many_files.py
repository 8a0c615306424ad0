# Hostile: a zip of 1001 members, the notebook and 1000 empty files. More files than a submission may have.
# assignment: 01_matmul_from_shapes
# delivery: zip
# member: @@ASSIGNMENT@@.ipynb
# member: junk/{i}.txt files 1000
# expect: * zero - too many files
