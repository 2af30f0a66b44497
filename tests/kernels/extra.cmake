# The kernel tests again for the other code paths: AVX2+FMA+F16C (what KYLIN_ARCH=avx2 ships), the
# scalar references (KYLIN_NO_SIMD, no arch flags), AVX-512 without VNNI (x86-64-v4: the int8
# kernels' 512-bit vpmaddubsw path) and AVX2 with AVX-VNNI (the VEX vpdpbusd of AVX2-only Intel
# cores). Each takes kylin_common_flags (warnings and, under KYLIN_SANITIZE, ASan+UBSan) but not
# kylin_build_flags, whose -march=native would hide the path under test. Every variant is built
# (the kernels must compile for each); the last two run only where the CPU has their instructions.
# Each variant is one unity build, as test_kernels is (half the compile time of one object per file);
# doctest_main.cpp stays its own object, so its DOCTEST_CONFIG_IMPLEMENT comes before any doctest.h.
set(kernel_variants avx2 scalar avx512 avxvnni)
set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/doctest_main.cpp PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
foreach(variant IN LISTS kernel_variants)
  add_executable(test_kernels_${variant} ${sources} ${CMAKE_CURRENT_SOURCE_DIR}/doctest_main.cpp)
  set_target_properties(test_kernels_${variant} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
  target_link_libraries(test_kernels_${variant} PRIVATE doctest::doctest kylin::kylin kylin_common_flags)
  target_compile_definitions(test_kernels_${variant} PRIVATE DOCTEST_CONFIG_SUPER_FAST_ASSERTS KYLIN_TEST_DATA="${CMAKE_CURRENT_SOURCE_DIR}/data"
                             KYLIN_BIN_DIR="${PROJECT_BINARY_DIR}/bin" KYLIN_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endforeach()
target_compile_options(test_kernels_avx2 PRIVATE -mavx2 -mfma -mf16c)
target_compile_definitions(test_kernels_scalar PRIVATE KYLIN_NO_SIMD)
target_compile_options(test_kernels_avx512 PRIVATE -march=x86-64-v4)
target_compile_options(test_kernels_avxvnni PRIVATE -mavx2 -mfma -mf16c -mavxvnni)

# The CPU flags of the machine that runs ctest (Linux; elsewhere only the first two variants run).
set(cpu_flags "")
if(EXISTS /proc/cpuinfo)
  file(STRINGS /proc/cpuinfo cpu_flags REGEX "^flags" LIMIT_COUNT 1)
endif()
function(cpu_has out)
  set(has TRUE)
  foreach(flag IN LISTS ARGN)
    if(NOT cpu_flags MATCHES " ${flag}( |$)")
      set(has FALSE)
    endif()
  endforeach()
  set(${out} ${has} PARENT_SCOPE)
endfunction()
cpu_has(has_avx512 avx512f avx512bw avx512vl avx512dq avx512cd)
cpu_has(has_avxvnni avx2 avx_vnni)
set(run_variants avx2 scalar)
if(has_avx512)
  list(APPEND run_variants avx512)
endif()
if(has_avxvnni)
  list(APPEND run_variants avxvnni)
endif()
foreach(variant IN LISTS run_variants)
  add_test(NAME kernels_${variant} COMMAND test_kernels_${variant} WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
endforeach()
