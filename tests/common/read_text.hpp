// A test-data file's whole contents as bytes; a file that cannot be opened fails the test, naming it.
#pragma once

#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace kylin::test {

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kylin::test
