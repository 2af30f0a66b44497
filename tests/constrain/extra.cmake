# constrain_ajv: texts sampled from the JSON-schema grammars, validated by ajv + ajv-formats (npm).
add_test(NAME constrain_ajv COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/constrain/ajv_check.sh $<TARGET_FILE:test_${area}>
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(constrain_ajv PROPERTIES TIMEOUT 300)
