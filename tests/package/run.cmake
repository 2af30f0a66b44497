# ctest `package`: installs the kylin build tree into a fresh prefix, configures and builds
# tests/package/consumer against it with find_package(kylin), and runs the consumer on a model.
# With CUDA=ON (a KYLIN_CUDA build) also tests/package/cuda_consumer, linking kylin::cuda.
# Inputs: KYLIN_BUILD_DIR, KYLIN_SOURCE_DIR, WORK_DIR, CXX, GENERATOR, MODEL_DIR, CUDA, CUDA_COMPILER.
cmake_minimum_required(VERSION 3.25)

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package test: ${what} failed (${rc})\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
run_step("cmake --install" ${CMAKE_COMMAND} --install "${KYLIN_BUILD_DIR}" --prefix "${prefix}")
foreach(f include/kylin/kylin.hpp include/kylin/io/safetensors.hpp lib/cmake/kylin/kylinConfig.cmake
          lib/cmake/kylin/kylinConfigVersion.cmake lib/cmake/kylin/kylinTargets.cmake
          share/kylin/cuda/kernels.cu share/kylin/cuda/register.cpp)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "package test: the install is missing ${f}")
  endif()
endforeach()
# include/ is headers only: translation units go to share/, the tests' CUDA emulator nowhere.
file(GLOB_RECURSE stray RELATIVE "${prefix}/include" "${prefix}/include/*.cu" "${prefix}/include/*.cpp"
     "${prefix}/include/*emulat*" "${prefix}/include/*fiber*")
if(stray)
  message(FATAL_ERROR "package test: the install's include/ holds ${stray}")
endif()
# Only the installed prefix is searched for kylin: the source tree must not leak in.
run_step("configure the consumer" ${CMAKE_COMMAND} -S "${KYLIN_SOURCE_DIR}/tests/package/consumer" -B "${WORK_DIR}/build"
         -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix}
         -Dkylin_DIR=${prefix}/lib/cmake/kylin)
run_step("build the consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
set(flags "")
foreach(f "${WORK_DIR}/build/build.ninja" "${WORK_DIR}/build/CMakeFiles/app.dir/flags.make")
  if(EXISTS "${f}")
    file(READ "${f}" text)
    string(APPEND flags "${text}")
  endif()
endforeach()
string(FIND "${flags}" "${KYLIN_SOURCE_DIR}/include" leaked)
if(NOT leaked EQUAL -1)
  message(FATAL_ERROR "package test: the consumer compiled against the source tree, not the install")
endif()
string(FIND "${flags}" "eigen3" eigen)  # Eigen is the kylin::eigen component's, not kylin::kylin's
if(NOT eigen EQUAL -1)
  message(FATAL_ERROR "package test: kylin::kylin put Eigen on the consumer's include path")
endif()
run_step("run the consumer" "${WORK_DIR}/build/app" "${MODEL_DIR}")
if(NOT step_output MATCHES "^qwen3 25 tensors [0-9]+ elements; no preset matched \\(closest: ")
  message(FATAL_ERROR "package test: unexpected consumer output: ${step_output}")
endif()
message(STATUS "package test: ${step_output}")

# find_package(kylin COMPONENTS eigen) and kylin::eigen: <kylin/eigen.hpp> from the install.
run_step("configure the Eigen consumer" ${CMAKE_COMMAND} -S "${KYLIN_SOURCE_DIR}/tests/package/eigen_consumer" -B "${WORK_DIR}/eigen"
         -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix}
         -Dkylin_DIR=${prefix}/lib/cmake/kylin)
run_step("build the Eigen consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/eigen")
run_step("run the Eigen consumer" "${WORK_DIR}/eigen/app" "${MODEL_DIR}")
if(NOT step_output MATCHES "^eigen 1x64 -?[0-9]+\\.[0-9]+")
  message(FATAL_ERROR "package test: unexpected Eigen consumer output: ${step_output}")
endif()
message(STATUS "package test (eigen): ${step_output}")

if(CUDA)
  run_step("configure the CUDA consumer" ${CMAKE_COMMAND} -S "${KYLIN_SOURCE_DIR}/tests/package/cuda_consumer" -B "${WORK_DIR}/cuda"
           -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER} -DCMAKE_CUDA_ARCHITECTURES=80
           -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix} -Dkylin_DIR=${prefix}/lib/cmake/kylin)
  run_step("build the CUDA consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/cuda")
  # A GPU prints "cuda argmax N"; without one, kylin's named error and exit 1, never a crash.
  execute_process(COMMAND "${WORK_DIR}/cuda/app" "${MODEL_DIR}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT ((rc EQUAL 0 AND out MATCHES "^cuda argmax [0-9]+") OR (rc EQUAL 1 AND err MATCHES "^\\[kylin.runtime\\] cuda: no CUDA device")))
    message(FATAL_ERROR "package test: the CUDA consumer exited ${rc}: ${out}${err}")
  endif()
  message(STATUS "package test (cuda): ${out}${err}")
endif()
