// Shared by the chat tests: render a template source and get the error it raised.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "kylin/chat/template.hpp"

namespace kylin::test {

// Builds and renders `source`; returns the error text ("" when it succeeded).
inline std::string error_of(const std::string& source, kylin::jinja::Limits limits = {}) {
  try {
    kylin::jinja::Template t(source, "chat template", limits);
    (void)t.render({});
  } catch (const kylin::Error& e) {
    CHECK(e.category() == kylin::ErrorCategory::chat_template);
    return e.what();
  }
  return "";
}

}  // namespace kylin::test
