# test_server talks HTTP through cpp-httplib (the same pkg-config flags as kylin-server) and runs
# the built kylin-server; server_openai_client, server_anthropic_client and server_responses_client
# run the official openai, @anthropic-ai/sdk and Responses API (openai, @openai/agents,
# @ai-sdk/openai) npm clients against it.
find_package(PkgConfig REQUIRED)
if(NOT TARGET PkgConfig::CPP_HTTPLIB)
  pkg_check_modules(CPP_HTTPLIB REQUIRED IMPORTED_TARGET GLOBAL cpp-httplib)
endif()
target_link_libraries(test_${area} PRIVATE PkgConfig::CPP_HTTPLIB)
if(TARGET kylin_server)
  add_dependencies(test_${area} kylin_server)
  add_test(NAME server_openai_client
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/openai_client.sh $<TARGET_FILE:kylin_server>
                   ${CMAKE_CURRENT_SOURCE_DIR}/data)
  set_tests_properties(server_openai_client PROPERTIES TIMEOUT 300)
  add_test(NAME server_anthropic_client
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/anthropic_client.sh $<TARGET_FILE:kylin_server>
                   ${CMAKE_CURRENT_SOURCE_DIR}/data)
  set_tests_properties(server_anthropic_client PROPERTIES TIMEOUT 300)
  add_test(NAME server_responses_client
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/server/responses_client.sh $<TARGET_FILE:kylin_server>
                   ${CMAKE_CURRENT_SOURCE_DIR}/data)
  set_tests_properties(server_responses_client PROPERTIES TIMEOUT 600)  # npm ci of 119 packages
endif()
if(TARGET kylin_cli)
  add_dependencies(test_${area} kylin_cli)  # logprobs_http_test compares with `kylin logits`
endif()
# request_images_test.cpp decodes the images it sends with kylin::image.
if(NOT TARGET kylin::image)
  message(FATAL_ERROR "tests/server needs kylin::image: libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev (scripts/setup.sh)")
endif()
target_link_libraries(test_${area} PRIVATE kylin::image)
