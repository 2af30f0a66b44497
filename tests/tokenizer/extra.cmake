# test_tokenizer checks the hand-written Qwen2 splitter against PCRE2 (UTF + UCP) as an oracle.
find_package(PkgConfig REQUIRED)
pkg_check_modules(KYLIN_PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
target_link_libraries(test_tokenizer PRIVATE PkgConfig::KYLIN_PCRE2)
