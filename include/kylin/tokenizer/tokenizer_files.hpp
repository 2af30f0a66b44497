// Reads a model directory's tokenizer files into a TokenizerSpec: tokenizer.json (BPE model, NFC
// normalizer, Split (Qwen2 or Qwen3.5 regex) + ByteLevel pre-tokenizer, ByteLevel decoder,
// post_processor), or else the older vocab.json + merges.txt pair with added tokens from
// tokenizer_config.json.
#pragma once

#include <simdjson.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kylin/core/error.hpp"
#include "kylin/tokenizer/added_tokens.hpp"
#include "kylin/tokenizer/post_processor.hpp"
#include "kylin/tokenizer/pretokenizer.hpp"

namespace kylin {

// Everything the Tokenizer is built from. Vocabulary keys are in byte-level form ("Ġthe").
struct TokenizerSpec {
  std::vector<std::pair<std::string, int>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::vector<AddedToken> added_tokens;
  bool nfc = true;
  SplitPattern split = SplitPattern::qwen2;  // chosen by the Split regex, never by the model type
  bool ignore_merges = false;
  PostProcessorSpec post_processor;  // vocab.json + merges.txt: none
  std::string source;  // the file it came from, for error messages
};

}  // namespace kylin

namespace kylin::detail {

using simdjson::dom::element;

inline simdjson::padded_string read_padded(const std::filesystem::path& path) {
  simdjson::padded_string text;
  if (auto err = simdjson::padded_string::load(path.string()).get(text))
    throw Error(ErrorCategory::tokenizer, path.string(), std::string("cannot read: ") + simdjson::error_message(err));
  return text;
}

// The type of a component ("NFC", "Sequence", ...), or "null".
inline std::string component_type(element e) {
  if (e.is_null()) return "null";
  std::string_view type;
  if (e["type"].get(type)) return "?";
  return std::string(type);
}

inline void check_normalizer(element e, const std::string& file, bool& nfc) {
  const std::string type = component_type(e);
  nfc = type == "NFC";
  if (type == "null" || type == "NFC") return;
  if (type == "Sequence") {
    simdjson::dom::array parts;
    if (!e["normalizers"].get(parts) && parts.size() <= 1) {
      if (parts.size() == 1) check_normalizer(parts.at(0), file, nfc);
      return;
    }
  }
  throw Error(ErrorCategory::tokenizer, file, "unsupported normalizer '" + type + "' (only NFC or none)");
}

// Accepts exactly Sequence[Split(a known pattern, Isolated), ByteLevel(use_regex=false)] and
// returns the pattern.
inline SplitPattern read_pre_tokenizer(element e, const std::string& file) {
  auto fail = [&](const std::string& why) {
    throw Error(ErrorCategory::tokenizer, file, "unsupported pre_tokenizer: " + why);
  };
  simdjson::dom::array parts;
  if (component_type(e) != "Sequence" || e["pretokenizers"].get(parts) || parts.size() != 2)
    fail("expected Sequence[Split, ByteLevel], got '" + component_type(e) + "'");
  element split = parts.at(0), byte_level = parts.at(1);
  std::string_view pattern, behavior;
  bool invert = true;
  if (component_type(split) != "Split" || split["pattern"]["Regex"].get(pattern) ||
      split["behavior"].get(behavior) || split["invert"].get(invert))
    fail("first step is not a Split with a Regex pattern");
  const std::optional<SplitPattern> known = split_pattern_of(pattern);
  if (!known) fail("Split pattern is neither the Qwen2 nor the Qwen3.5 pattern: " + std::string(pattern));
  if (behavior != "Isolated" || invert) fail("Split must be Isolated and not inverted");
  bool use_regex = true, prefix_space = true;
  if (component_type(byte_level) != "ByteLevel" || byte_level["use_regex"].get(use_regex) ||
      byte_level["add_prefix_space"].get(prefix_space) || use_regex || prefix_space)
    fail("second step must be ByteLevel with use_regex=false and add_prefix_space=false");
  return *known;
}

inline AddedToken parse_added_token(element e, int id, const std::string& file) {
  AddedToken t;
  t.id = id;
  std::string_view content;
  if (e["content"].get(content) || content.empty())
    throw Error(ErrorCategory::tokenizer, file, "added token " + std::to_string(id) + " has no content");
  t.content = std::string(content);
  auto flag = [&](const char* name, bool fallback) {
    bool v = fallback;
    return e[name].get(v) ? fallback : v;
  };
  t.special = flag("special", false);
  t.lstrip = flag("lstrip", false);
  t.rstrip = flag("rstrip", false);
  t.normalized = flag("normalized", !t.special);  // HF's default
  t.single_word = flag("single_word", false);
  return t;
}

inline void read_vocab_object(element vocab, TokenizerSpec& spec, const std::string& file) {
  simdjson::dom::object obj;
  if (vocab.get(obj)) throw Error(ErrorCategory::tokenizer, file, "vocab is not a JSON object");
  spec.vocab.reserve(obj.size());
  for (auto field : obj) {
    std::int64_t id = -1;
    if (field.value.get(id) || id < 0 || id > INT32_MAX)
      throw Error(ErrorCategory::tokenizer, file, "vocab entry '" + std::string(field.key) + "' has no valid id");
    spec.vocab.emplace_back(std::string(field.key), static_cast<int>(id));
  }
}

inline std::pair<std::string, std::string> split_merge(std::string_view line, const std::string& file) {
  const std::size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 >= line.size() ||
      line.find(' ', space + 1) != std::string_view::npos)
    throw Error(ErrorCategory::tokenizer, file, "merge '" + std::string(line) + "' is not two tokens");
  return {std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
}

inline void read_bpe_model(element model, TokenizerSpec& spec, const std::string& file) {
  if (std::string type = component_type(model); type != "BPE" && type != "?")
    throw Error(ErrorCategory::tokenizer, file, "unsupported model type '" + type + "' (only BPE)");
  bool flag = false;
  if (!model["byte_fallback"].get(flag) && flag)
    throw Error(ErrorCategory::tokenizer, file, "BPE byte_fallback is not supported");
  std::string_view affix;
  if ((!model["continuing_subword_prefix"].get(affix) && !affix.empty()) ||
      (!model["end_of_word_suffix"].get(affix) && !affix.empty()))
    throw Error(ErrorCategory::tokenizer, file, "BPE subword prefixes/suffixes are not supported");
  if (element dropout; !model["dropout"].get(dropout) && !dropout.is_null())
    throw Error(ErrorCategory::tokenizer, file, "BPE dropout is not supported");
  if (!model["ignore_merges"].get(flag)) spec.ignore_merges = flag;
  element vocab;
  simdjson::dom::array merges;
  if (model["vocab"].get(vocab) || model["merges"].get(merges))
    throw Error(ErrorCategory::tokenizer, file, "BPE model needs a 'vocab' object and a 'merges' array");
  read_vocab_object(vocab, spec, file);
  spec.merges.reserve(merges.size());
  for (element m : merges) {
    std::string_view line;
    simdjson::dom::array pair;
    if (!m.get(line)) {
      spec.merges.push_back(split_merge(line, file));
    } else if (!m.get(pair) && pair.size() == 2 && pair.at(0).is_string() && pair.at(1).is_string()) {
      spec.merges.emplace_back(std::string(pair.at(0).get_string().value()),
                               std::string(pair.at(1).get_string().value()));
    } else {
      throw Error(ErrorCategory::tokenizer, file, "merge #" + std::to_string(spec.merges.size()) +
                                                      " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
}

// tokenizer.json's text; `file` names it in errors (the fuzzer feeds text that no file holds).
inline TokenizerSpec parse_tokenizer_json(const simdjson::padded_string& text, const std::string& file) {
  simdjson::dom::parser parser;
  element root, model;
  if (auto err = parser.parse(text).get(root))
    throw Error(ErrorCategory::tokenizer, file, std::string("invalid JSON: ") + simdjson::error_message(err));
  TokenizerSpec spec;
  spec.source = file;
  if (root["model"].get(model)) throw Error(ErrorCategory::tokenizer, file, "no 'model'");
  read_bpe_model(model, spec, file);
  simdjson::dom::array added;
  if (!root["added_tokens"].get(added))
    for (element a : added) {
      std::int64_t id = -1;
      if (a["id"].get(id) || id < 0 || id > INT32_MAX)
        throw Error(ErrorCategory::tokenizer, file, "added token without a valid id");
      spec.added_tokens.push_back(parse_added_token(a, static_cast<int>(id), file));
    }
  element normalizer, pre_tokenizer, decoder, post_processor;
  spec.nfc = false;  // no "normalizer" key: none
  if (!root["normalizer"].get(normalizer)) check_normalizer(normalizer, file, spec.nfc);
  if (root["pre_tokenizer"].get(pre_tokenizer))
    throw Error(ErrorCategory::tokenizer, file, "no 'pre_tokenizer'");
  spec.split = read_pre_tokenizer(pre_tokenizer, file);
  if (!root["decoder"].get(decoder))
    if (std::string type = component_type(decoder); type != "ByteLevel" && type != "null")
      throw Error(ErrorCategory::tokenizer, file, "unsupported decoder '" + type + "' (only ByteLevel)");
  if (!root["post_processor"].get(post_processor)) spec.post_processor = parse_post_processor(post_processor, file);
  return spec;
}

inline TokenizerSpec load_tokenizer_json(const std::filesystem::path& path) {
  return parse_tokenizer_json(read_padded(path), path.string());
}

// vocab.json + merges.txt (+ tokenizer_config.json): the Qwen2 pipeline is assumed
// (NFC, Qwen2 split, byte level), as transformers' Qwen2Tokenizer does.
inline TokenizerSpec load_vocab_merges(const std::filesystem::path& dir) {
  TokenizerSpec spec;
  const std::string vocab_file = (dir / "vocab.json").string();
  spec.source = vocab_file;
  simdjson::dom::parser parser;
  auto vocab_text = read_padded(vocab_file);
  element vocab;
  if (auto err = parser.parse(vocab_text).get(vocab))
    throw Error(ErrorCategory::tokenizer, vocab_file, std::string("invalid JSON: ") + simdjson::error_message(err));
  read_vocab_object(vocab, spec, vocab_file);

  const std::string merges_file = (dir / "merges.txt").string();
  std::ifstream in(merges_file, std::ios::binary);
  if (!in) throw Error(ErrorCategory::tokenizer, merges_file, "cannot open");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    spec.merges.push_back(split_merge(line, merges_file));
  }

  const auto config_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    const std::string config_file = config_path.string();
    auto config_text = read_padded(config_path);
    element config;
    simdjson::dom::object decoder;
    if (auto err = parser.parse(config_text).get(config))
      throw Error(ErrorCategory::tokenizer, config_file, std::string("invalid JSON: ") + simdjson::error_message(err));
    if (!config["added_tokens_decoder"].get(decoder))
      for (auto field : decoder) {
        int id = -1;
        const std::string key(field.key);
        try {
          std::size_t used = 0;
          id = std::stoi(key, &used);
          if (used != key.size() || id < 0) id = -1;
        } catch (const std::exception&) {
          id = -1;
        }
        if (id < 0) throw Error(ErrorCategory::tokenizer, config_file, "added_tokens_decoder key '" + key + "' is not an id");
        spec.added_tokens.push_back(parse_added_token(field.value, id, config_file));
      }
  }
  return spec;
}

}  // namespace kylin::detail
