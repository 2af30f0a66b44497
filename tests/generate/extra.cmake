# chat_images_test.cpp decodes tests/data/images/*.png with kylin::image (libpng).
if(NOT TARGET kylin::image)
  message(FATAL_ERROR "tests/generate needs kylin::image: libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev (scripts/setup.sh)")
endif()
target_link_libraries(test_generate PRIVATE kylin::image)
