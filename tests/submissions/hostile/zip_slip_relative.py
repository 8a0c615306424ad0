# Hostile: a zip whose member climbs out with ../ to the instructor's nbgrader_config.py (nbgrader's zip_collect stopped the class: UnsafeMember). Refused from the zip's directory; nothing is unpacked.
# assignment: 01_matmul_from_shapes
# delivery: zip
# member: @@ASSIGNMENT@@.ipynb
# member: ../../../../../../../../../../../../..@@COURSE@@/nbgrader_config.py text c = get_config()  # overwritten
# expect: * zero - unsafe archive
