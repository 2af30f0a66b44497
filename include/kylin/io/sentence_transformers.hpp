// A sentence-transformers embedding directory (Qwen3-Embedding): modules.json marks it, and
// 1_Pooling/config.json and config_sentence_transformers.json say how its texts become vectors.
// EmbeddingInfo is what kylin reads of them; every malformed or unsupported part is a named error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kylin/core/error.hpp"
#include "kylin/core/json.hpp"
#include "kylin/io/checkpoint.hpp"

namespace kylin::io {

// sentence-transformers' own marker file: its loader starts from modules.json.
inline bool is_sentence_transformers_dir(const std::filesystem::path& dir) {
  return std::filesystem::exists(dir / "modules.json");
}

enum class Pooling { last_token, mean, cls };

inline std::string_view pooling_name(Pooling p) {
  switch (p) {
    case Pooling::last_token: return "lasttoken";
    case Pooling::mean: return "mean_tokens";
    case Pooling::cls: return "cls_token";
  }
  return "?";
}

struct EmbeddingInfo {
  Pooling pooling = Pooling::last_token;
  std::int64_t dimension = 0;  // 1_Pooling word_embedding_dimension: the model's hidden size
  bool normalize = false;      // modules.json has a Normalize module (kylin's embed normalises always)
  std::vector<std::pair<std::string, std::string>> prompts;  // name -> text prepended to the input, file order
  std::string default_prompt_name;                          // "" = none

  const std::string* prompt(std::string_view name) const {
    for (const auto& [n, text] : prompts)
      if (n == name) return &text;
    return nullptr;
  }
  std::string prompt_names() const {
    std::string s;
    for (const auto& [n, text] : prompts) s += (s.empty() ? "" : ", ") + n;
    return s.empty() ? "none" : s;
  }
};

namespace detail {

inline json::Value read_json(const std::filesystem::path& path) {
  return json::parse(read_text_file(path), path.string(), ErrorCategory::load);
}

// 1_Pooling/config.json: exactly one pooling_mode_* flag set, one kylin implements.
inline void read_pooling(const std::filesystem::path& path, EmbeddingInfo& info) {
  const json::Value config = read_json(path);
  const std::string where = path.string();
  if (!config.is_object()) throw Error(ErrorCategory::load, where, "not a JSON object");
  constexpr std::string_view prefix = "pooling_mode_";
  std::vector<std::string> modes;
  for (const auto& [key, value] : config.as_object()) {
    if (!key.starts_with(prefix)) continue;
    if (!value.is_bool()) throw Error(ErrorCategory::load, where, key + " must be true or false");
    if (value.as_bool()) modes.push_back(key.substr(prefix.size()));
  }
  if (modes.size() != 1)
    throw Error(ErrorCategory::load, where, "exactly one pooling_mode_* must be true, " + std::to_string(modes.size()) + " are");
  if (modes[0] == "lasttoken") info.pooling = Pooling::last_token;
  else if (modes[0] == "mean_tokens") info.pooling = Pooling::mean;
  else if (modes[0] == "cls_token") info.pooling = Pooling::cls;
  else throw Error(ErrorCategory::load, where, "pooling mode '" + modes[0] + "' is not supported (lasttoken, mean_tokens, cls_token are)");
  const json::Value* dim = config.find("word_embedding_dimension");
  if (!dim || !dim->is_int() || dim->as_int() <= 0) throw Error(ErrorCategory::load, where, "word_embedding_dimension must be a positive integer");
  info.dimension = dim->as_int();
  // Mean pooling without the prompt needs the prompt's token count per input; nothing uses it yet.
  if (const json::Value* p = config.find("include_prompt"); p && p->is_bool() && !p->as_bool() && info.pooling == Pooling::mean)
    throw Error(ErrorCategory::load, where, "include_prompt: false with mean pooling is not supported");
}

// config_sentence_transformers.json (optional): named prompts and the default one.
inline void read_prompts(const std::filesystem::path& path, EmbeddingInfo& info) {
  if (!std::filesystem::exists(path)) return;
  const json::Value config = read_json(path);
  const std::string where = path.string();
  if (const json::Value* prompts = config.find("prompts"); prompts && !prompts->is_null()) {
    if (!prompts->is_object()) throw Error(ErrorCategory::load, where, "prompts must be an object of name: text");
    for (const auto& [name, text] : prompts->as_object()) {
      if (!text.is_string()) throw Error(ErrorCategory::load, where, "prompt '" + name + "' is not a string");
      info.prompts.emplace_back(name, text.as_string());
    }
  }
  if (const json::Value* d = config.find("default_prompt_name"); d && !d->is_null()) {
    if (!d->is_string() || !info.prompt(d->as_string()))
      throw Error(ErrorCategory::load, where, "default_prompt_name is not one of the prompts (" + info.prompt_names() + ")");
    info.default_prompt_name = d->as_string();
  }
}

}  // namespace detail

// nullopt when `dir` is not a sentence-transformers directory; else what its files say, checked.
inline std::optional<EmbeddingInfo> load_embedding_info(const std::filesystem::path& dir) {
  if (!is_sentence_transformers_dir(dir)) return std::nullopt;
  const std::filesystem::path modules_path = dir / "modules.json";
  const std::string where = modules_path.string();
  const json::Value modules = detail::read_json(modules_path);
  if (!modules.is_array()) throw Error(ErrorCategory::load, where, "not a JSON array of modules");
  EmbeddingInfo info;
  std::optional<std::string> pooling_path;
  for (const json::Value& m : modules.as_array()) {
    const json::Value *type = m.find("type"), *path = m.find("path");
    if (!type || !type->is_string() || !path || !path->is_string())
      throw Error(ErrorCategory::load, where, "every module needs a string 'type' and 'path'");
    const std::string& t = type->as_string();
    if (t == "sentence_transformers.models.Transformer") {
      if (!path->as_string().empty())
        throw Error(ErrorCategory::load, where, "the Transformer module must be the directory itself, not '" + path->as_string() + "'");
    } else if (t == "sentence_transformers.models.Pooling") {
      pooling_path = path->as_string();
    } else if (t == "sentence_transformers.models.Normalize") {
      info.normalize = true;
    } else {
      throw Error(ErrorCategory::load, where, "module type '" + t + "' is not supported (Transformer, Pooling, Normalize are)");
    }
  }
  if (!pooling_path) throw Error(ErrorCategory::load, where, "no sentence_transformers.models.Pooling module");
  if (pooling_path->empty() || pooling_path->find("..") != std::string::npos || pooling_path->front() == '/')
    throw Error(ErrorCategory::load, where, "Pooling module path '" + *pooling_path + "' must be a subdirectory");
  detail::read_pooling(dir / *pooling_path / "config.json", info);
  detail::read_prompts(dir / "config_sentence_transformers.json", info);
  return info;
}

}  // namespace kylin::io
