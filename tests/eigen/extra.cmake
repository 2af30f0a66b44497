# The Eigen views need the kylin::eigen component (Eigen is optional for the rest of kylin).
target_link_libraries(test_eigen PRIVATE kylin::eigen)
