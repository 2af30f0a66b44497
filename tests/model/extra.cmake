# The portable build: the forward tests against the float64 references again with the CPU kernels
# forced (KYLIN_CPU) to each other kernel set this CPU runs; the plain run takes the best one.
if(KYLIN_ARCH STREQUAL "portable" AND EXISTS /proc/cpuinfo)
  file(STRINGS /proc/cpuinfo model_cpu_flags REGEX "^flags" LIMIT_COUNT 1)
  set(forced_sets scalar)
  if(model_cpu_flags MATCHES " avx2( |$)" AND model_cpu_flags MATCHES " fma( |$)" AND model_cpu_flags MATCHES " f16c( |$)")
    list(APPEND forced_sets avx2)
    if(model_cpu_flags MATCHES " avx_vnni( |$)")
      list(APPEND forced_sets avx2-vnni)
    endif()
    if(model_cpu_flags MATCHES " avx512f( |$)" AND model_cpu_flags MATCHES " avx512bw( |$)" AND model_cpu_flags MATCHES " avx512vl( |$)"
       AND model_cpu_flags MATCHES " avx512dq( |$)" AND model_cpu_flags MATCHES " avx512cd( |$)" AND model_cpu_flags MATCHES " avx512_vnni( |$)")
      list(APPEND forced_sets avx512)  # avx512-vnni is the plain run's choice on such a CPU
    endif()
  endif()
  foreach(set IN LISTS forced_sets)
    add_test(NAME model_cpu_${set} COMMAND test_model "--test-case=f32 KV: *,f16 KV: *,q8 weights: *,q4 weights: *,one prefill == *"
             WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
    set_tests_properties(model_cpu_${set} PROPERTIES ENVIRONMENT KYLIN_CPU=${set} TIMEOUT 900)
  endforeach()
endif()
