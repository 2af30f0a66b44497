# The CUDA emulator's fibers switch with Boost.Context (tests/common/cuda_emulator/fiber.hpp).
find_package(Boost 1.74 REQUIRED COMPONENTS context)
target_link_libraries(test_backends PRIVATE Boost::context)

# `kylin logits --backend cuda`: with KYLIN_CUDA it loads the backend module and either runs (a
# GPU is present) or fails cleanly with the named "no CUDA device" error, never crashes, and kylin
# itself links nothing of CUDA; without KYLIN_CUDA it fails with "no CUDA backend"
# (tests/backends/cuda_device_test.sh).
if(TARGET kylin_cli)
  add_test(NAME cuda_device COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/backends/cuda_device_test.sh $<TARGET_FILE:kylin_cli>
                                         ${CMAKE_CURRENT_SOURCE_DIR}/data/models/tiny-qwen3-untied
                                         $<IF:$<TARGET_EXISTS:kylin_cuda_module>,built,absent>)
  set_tests_properties(cuda_device PROPERTIES TIMEOUT 120)
endif()

# scripts/gpu-check.sh's checker: built (so it compiles and links) wherever the CUDA backend is;
# run only by that script, on a machine with a GPU.
if(TARGET kylin_cuda)
  add_executable(kylin_gpu_check ${CMAKE_CURRENT_SOURCE_DIR}/backends/gpu/gpu_check.cpp)
  set_target_properties(kylin_gpu_check PROPERTIES OUTPUT_NAME kylin-gpu-check)
  target_link_libraries(kylin_gpu_check PRIVATE kylin_cuda kylin_program kylin_build_flags)
  target_include_directories(kylin_gpu_check PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_definitions(kylin_gpu_check PRIVATE KYLIN_TEST_DATA="${CMAKE_CURRENT_SOURCE_DIR}/data")
endif()

# The portable build's kernel-set modules are tested where they are built (cpu_dispatch_test.cpp).
if(KYLIN_ARCH STREQUAL "portable")
  target_compile_definitions(test_backends PRIVATE KYLIN_PORTABLE_BUILD)
endif()
