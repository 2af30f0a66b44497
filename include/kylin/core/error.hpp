// kylin::Error: the one exception type the library throws, at load time only.
// Its text always reads "[kylin.<category>] <context>: <message>", e.g.
// "[kylin.load] model.layers.3.mlp.up_proj.weight: expected [3072,1024], got [1024,3072]".
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace kylin {

enum class ErrorCategory { load, config, tokenizer, chat_template, model, runtime, request, io };

constexpr std::string_view category_name(ErrorCategory c) {
  switch (c) {
    case ErrorCategory::load: return "load";
    case ErrorCategory::config: return "config";
    case ErrorCategory::tokenizer: return "tokenizer";
    case ErrorCategory::chat_template: return "template";
    case ErrorCategory::model: return "model";
    case ErrorCategory::runtime: return "runtime";
    case ErrorCategory::request: return "request";
    case ErrorCategory::io: return "io";
  }
  return "unknown";
}

class Error : public std::runtime_error {
 public:
  Error(ErrorCategory category, std::string context, const std::string& message)
      : std::runtime_error(format(category, context, message)),
        category_(category),
        context_(std::move(context)),
        message_(message) {}

  ErrorCategory category() const noexcept { return category_; }
  // What the error is about: a file, a tensor name, a config field, a template line.
  const std::string& context() const noexcept { return context_; }
  // What is wrong, without the category and context.
  const std::string& message() const noexcept { return message_; }

 private:
  static std::string format(ErrorCategory c, const std::string& context, const std::string& message) {
    std::string s = "[kylin.";
    s += category_name(c);
    s += "] ";
    if (!context.empty()) {
      s += context;
      s += ": ";
    }
    s += message;
    return s;
  }

  ErrorCategory category_;
  std::string context_, message_;
};

}  // namespace kylin
