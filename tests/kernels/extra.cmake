# The kernel tests again for the two other code paths: AVX2+FMA+F16C (what KYLIN_ARCH=avx2 ships)
# and the scalar references (KYLIN_NO_SIMD, no arch flags). Both take kylin_common_flags (warnings
# and, under KYLIN_SANITIZE, ASan+UBSan) but not kylin_build_flags, whose -march=native would hide
# the path under test.
foreach(variant IN ITEMS avx2 scalar)
  add_executable(test_kernels_${variant} ${sources} ${CMAKE_CURRENT_SOURCE_DIR}/doctest_main.cpp)
  target_link_libraries(test_kernels_${variant} PRIVATE doctest::doctest kylin::kylin kylin_common_flags)
  target_compile_definitions(test_kernels_${variant} PRIVATE DOCTEST_CONFIG_SUPER_FAST_ASSERTS KYLIN_TEST_DATA="${CMAKE_CURRENT_SOURCE_DIR}/data"
                             KYLIN_BIN_DIR="${PROJECT_BINARY_DIR}/bin" KYLIN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_test(NAME kernels_${variant} COMMAND test_kernels_${variant} WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
endforeach()
target_compile_options(test_kernels_avx2 PRIVATE -mavx2 -mfma -mf16c)
target_compile_definitions(test_kernels_scalar PRIVATE KYLIN_NO_SIMD)
