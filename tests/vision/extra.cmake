# processor_test.cpp decodes tests/data/images/*.png with kylin::image (libpng) to check the resize and
# pixel_values against the reference.
if(NOT TARGET kylin::image)
  message(FATAL_ERROR "tests/vision needs kylin::image: libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev (scripts/setup.sh)")
endif()
target_link_libraries(test_vision PRIVATE kylin::image)
