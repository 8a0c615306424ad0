# Hostile: a folder name with what nbgrader's glob of students reads as a pattern ([ ] *), quotes, a comma and spaces. Graded under an id that keeps the name, with the glob characters written ~XX.
# assignment: 01_matmul_from_shapes
# name: Zoë [O'Brien], Jr.*
# student: Zoë ~5BO'Brien~5D, Jr.~2A
# expect: * full
