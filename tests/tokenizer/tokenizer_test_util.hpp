// Shared helpers of the tokenizer tests: the Qwen3 tokenizer loaded once, jsonl cases.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include "kylin/core/json.hpp"
#include "kylin/tokenizer/tokenizer.hpp"

namespace kylin::test {

inline const std::string qwen3_dir = std::string(KYLIN_TEST_DATA) + "/qwen3-tokenizer";

inline const Tokenizer& qwen3() {
  static const Tokenizer tokenizer = Tokenizer::from_dir(qwen3_dir);
  return tokenizer;
}

struct Case {
  std::string text;
  std::vector<int> ids;
  json::Value line;  // the whole record, for extra fields
};

inline std::vector<Case> read_cases(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json::Value v = json::parse(line, path);
    Case c;
    c.text = v.find("text")->as_string();
    for (const auto& id : v.find("ids")->as_array()) c.ids.push_back(static_cast<int>(id.as_int()));
    c.line = std::move(v);
    cases.push_back(std::move(c));
  }
  return cases;
}

// The text of the kylin::Error f throws, or "(no error)".
std::string error_text(auto&& f) {
  try {
    f();
  } catch (const kylin::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace kylin::test
