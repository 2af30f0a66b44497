// kylin::ChatTemplate: renders chat messages into a prompt exactly as transformers'
// apply_chat_template(tokenize=False) does, by interpreting the model's own Jinja template.
// render_prompt() also returns which bytes came from the request (see docs/CHAT.md).
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kylin/chat/template.hpp"
#include "kylin/core/error.hpp"
#include "kylin/core/json.hpp"

namespace kylin {

// How text inside messages that spells an added token (<|im_start|>, <|im_end|>, <tool_call>)
// is tokenized. `special`: as that token, exactly like transformers' apply_chat_template(
// tokenize=True) (a user can forge turns). `plain`: as the text it spells; control tokens
// come only from the template itself. See docs/CHAT.md.
enum class ContentTokens { special, plain };

// A rendered prompt and the byte ranges of it that came from the request: message fields,
// tools and template kwargs, as far as the template's string operations let them be followed
// (an operation that mixes template text and request data in ways not tracked marks its whole
// result). Tokenizer::encode_with_plain(text, from_request) keeps added tokens out of those ranges.
struct RenderedPrompt {
  std::string text;
  std::vector<TextRange> from_request;  // sorted, disjoint
};

struct RenderOptions {
  bool add_generation_prompt = false;  // transformers' default
  json::Value tools;                   // null: no tools (the template sees `tools` as none)
  json::Value kwargs;                  // object of extra template variables, e.g. {"enable_thinking": false}
};

class ChatTemplate {
 public:
  // `special_tokens`: {"bos_token": "...", ...}, visible to the template like transformers'
  // special_tokens_map. `name` prefixes error contexts.
  explicit ChatTemplate(std::string source, json::Value special_tokens = json::Object{},
                        std::string name = "chat template")
      : source_(source), template_(std::move(source), std::move(name)), special_tokens_(std::move(special_tokens)) {}

  // Reads `chat_template.jinja` if present (newer checkpoints), else `chat_template` from
  // `tokenizer_config.json` (a string, or a list of {name, template} of which "default" is used).
  // bos/eos/unk/pad tokens come from tokenizer_config.json (strings or {content: ...}).
  static ChatTemplate from_dir(const std::filesystem::path& dir) {
    const auto config_path = dir / "tokenizer_config.json";
    json::Value config = json::Object{};
    if (std::filesystem::exists(config_path)) config = json::parse(read_file(config_path), config_path.string());
    json::Value special = special_tokens_of(config);
    const auto jinja_path = dir / "chat_template.jinja";
    if (std::filesystem::exists(jinja_path)) return ChatTemplate(read_file(jinja_path), special, jinja_path.string());
    if (!std::filesystem::exists(config_path))
      throw Error(ErrorCategory::chat_template, config_path.string(), "file not found (no chat template)");
    return ChatTemplate(template_source(config, config_path.string()), special, config_path.string() + " chat_template");
  }

  // messages: [{role, content, ...}]; returns the prompt text.
  std::string render(const json::Value& messages, const RenderOptions& options = {}) const {
    return render_prompt(messages, options).text;
  }

  // The prompt text (the same bytes as render()) and the ranges that came from the request.
  RenderedPrompt render_prompt(const json::Value& messages, const RenderOptions& options = {}) const {
    if (!messages.is_array()) throw Error(ErrorCategory::request, "messages", "expected a JSON array of messages");
    for (const auto& m : messages.as_array())
      if (!m.is_object()) throw Error(ErrorCategory::request, "messages", "every message must be a JSON object");
    if (!options.kwargs.is_null() && !options.kwargs.is_object())
      throw Error(ErrorCategory::request, "chat template kwargs", "expected a JSON object");
    jinja::DictData vars;
    for (const auto& [k, v] : special_tokens_.as_object()) vars.set(k, jinja::from_json(v));
    json::Value tools = options.tools;
    if (const json::Value* t = options.kwargs.find("tools")) {
      if (!tools.is_null()) throw Error(ErrorCategory::request, "tools", "given both as an option and in kwargs");
      tools = *t;
    }
    try {
      vars.set("messages", jinja::from_json(messages, true));
      vars.set("tools", jinja::from_json(tools, true));
    } catch (const jinja::EvalError& e) {  // e.g. nested too deep
      throw Error(ErrorCategory::request, "messages", e.what());
    }
    vars.set("documents", jinja::None{});
    vars.set("add_generation_prompt", options.add_generation_prompt);
    if (options.kwargs.is_object())
      for (const auto& [k, v] : options.kwargs.as_object()) {
        if (k == "messages" || k == "add_generation_prompt" || k == "documents")
          throw Error(ErrorCategory::request, "chat template kwargs", "'" + k + "' cannot be passed as a kwarg");
        try {
          if (k != "tools") vars.set(k, jinja::from_json(v, true));
        } catch (const jinja::EvalError& e) {
          throw Error(ErrorCategory::request, "chat template kwargs", e.what());
        }
      }
    jinja::TaintedText out = template_.render_marked(vars);
    return {std::move(out.text), std::move(out.taint)};
  }

  // Bounds of one render (iterations, output, memory, time); see jinja::Limits.
  const jinja::Limits& limits() const { return template_.limits(); }
  void set_limits(const jinja::Limits& limits) { template_.set_limits(limits); }

  const std::string& source() const { return source_; }
  // Empty when the tokenizer config has none (Qwen3 has no bos_token).
  std::string bos_token() const { return token("bos_token"); }
  std::string eos_token() const { return token("eos_token"); }

 private:
  static std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(ErrorCategory::io, path.string(), "cannot open file");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  static json::Value special_tokens_of(const json::Value& config) {
    json::Value out = json::Object{};
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"}) {
      const json::Value* v = config.find(key);
      if (v && v->is_object()) v = v->find("content");
      if (v && v->is_string()) out.set(key, *v);
    }
    return out;
  }

  static std::string template_source(const json::Value& config, const std::string& where) {
    const json::Value* t = config.find("chat_template");
    if (!t || t->is_null()) throw Error(ErrorCategory::chat_template, where, "no chat_template in the tokenizer config");
    if (t->is_string()) return t->as_string();
    if (t->is_array()) {
      for (const auto& entry : t->as_array()) {
        const json::Value* name = entry.find("name");
        const json::Value* body = entry.find("template");
        if (name && name->is_string() && name->as_string() == "default" && body && body->is_string())
          return body->as_string();
      }
      throw Error(ErrorCategory::chat_template, where, "chat_template list has no template named 'default'");
    }
    throw Error(ErrorCategory::chat_template, where, "chat_template must be a string or a list of {name, template}");
  }

  std::string token(std::string_view key) const {
    const json::Value* v = special_tokens_.find(key);
    return v && v->is_string() ? v->as_string() : std::string();
  }

  std::string source_;
  jinja::Template template_;
  json::Value special_tokens_;
};

}  // namespace kylin
