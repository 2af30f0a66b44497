# image_decode_test.cpp decodes with kylin::image (libpng, libjpeg-turbo, libwebp, giflib) and
# builds its test files with the same libraries' encoders.
if(NOT TARGET kylin::image)
  message(FATAL_ERROR "tests/io needs kylin::image: libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev (scripts/setup.sh)")
endif()
target_link_libraries(test_io PRIVATE kylin::image)
