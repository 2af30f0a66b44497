// tokenizer.json's "post_processor": the special tokens HF tokenizers puts around an encoding when
// add_special_tokens=True (TemplateProcessing, BertProcessing, RobertaProcessing; ByteLevel and
// null add none; Sequence chains them). Parsed into a PostProcessorSpec, resolved against the vocab.
#pragma once

#include <simdjson.h>

#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kylin/core/error.hpp"

namespace kylin {

// One piece of a template: input sequence A or B, or a named special token (its ids come from
// the processor's special_tokens map). Type ids are parsed by HF but change no id, so they are dropped.
struct TemplatePiece {
  enum class Kind { sequence_a, sequence_b, special };
  Kind kind = Kind::sequence_a;
  std::string special;  // the special token's name when kind == special
};

// A post-processor as tokenizer.json writes it, before its ids are checked against a vocabulary.
// Empty `single` and `pair` (ByteLevel, null) leave the ids as they are.
struct PostProcessorSpec {
  std::vector<TemplatePiece> single = {{TemplatePiece::Kind::sequence_a, {}}};
  std::vector<TemplatePiece> pair = {{TemplatePiece::Kind::sequence_a, {}}, {TemplatePiece::Kind::sequence_b, {}}};
  std::vector<std::pair<std::string, std::vector<int>>> special_tokens;  // name -> ids
  std::string type = "null";  // as written, for messages ("Sequence[ByteLevel, TemplateProcessing]")
};

// A post-processor resolved against a vocabulary: templates whose special tokens are ids.
class PostProcessor {
 public:
  PostProcessor() = default;  // adds nothing, as HF's null post_processor

  // `valid(id)` says whether an id exists in the vocabulary; errors name `source` (the file).
  template <class ValidId>
  PostProcessor(const PostProcessorSpec& spec, const std::string& source, ValidId valid) : type_(spec.type) {
    const std::unordered_map<std::string, std::vector<int>> specials(spec.special_tokens.begin(), spec.special_tokens.end());
    single_ = resolve(specials, spec.single, "single", source, valid);
    pair_ = resolve(specials, spec.pair, "pair", source, valid);
  }

  // `a` with the single template applied (HF: tokenizer.post_process(encoding, None, True)).
  std::vector<int> process(std::span<const int> a) const { return apply(single_, a, {}); }
  // `a` and `b` with the pair template applied.
  std::vector<int> process(std::span<const int> a, std::span<const int> b) const { return apply(pair_, a, b); }
  const std::string& type() const { return type_; }

 private:
  using Kind = TemplatePiece::Kind;
  struct Piece {
    Kind kind = Kind::sequence_a;
    std::vector<int> ids;  // [ids of the special token] when kind == special
  };

  template <class ValidId>
  static std::vector<Piece> resolve(const std::unordered_map<std::string, std::vector<int>>& specials,
                                    const std::vector<TemplatePiece>& pieces, const char* which, const std::string& source,
                                    ValidId valid) {
    std::vector<Piece> out;
    for (const TemplatePiece& p : pieces) {
      if (p.kind != Kind::special) {
        out.push_back({p.kind, {}});
        continue;
      }
      const auto it = specials.find(p.special);
      if (it == specials.end())
        throw Error(ErrorCategory::tokenizer, source, "post_processor: the " + std::string(which) + " template uses special token '" +
                                                          p.special + "', which its special_tokens do not define");
      for (int id : it->second)
        if (!valid(id))
          throw Error(ErrorCategory::tokenizer, source, "post_processor: special token '" + p.special + "' has id " +
                                                            std::to_string(id) + ", which is not in the vocabulary");
      out.push_back({Kind::special, it->second});
    }
    return out;
  }

  static std::vector<int> apply(const std::vector<Piece>& pieces, std::span<const int> a, std::span<const int> b) {
    std::vector<int> out;
    for (const Piece& p : pieces) {
      const std::span<const int> ids = p.kind == Kind::sequence_a ? a : p.kind == Kind::sequence_b ? b : std::span<const int>(p.ids);
      out.insert(out.end(), ids.begin(), ids.end());
    }
    return out;
  }

  std::vector<Piece> single_ = {{Kind::sequence_a, {}}};                          // [pieces]
  std::vector<Piece> pair_ = {{Kind::sequence_a, {}}, {Kind::sequence_b, {}}};  // [pieces]
  std::string type_ = "null";
};

}  // namespace kylin

namespace kylin::detail {

// {"Sequence": {"id": "A", "type_id": 0}} or {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}.
inline std::vector<TemplatePiece> parse_template(simdjson::dom::element e, const char* which, const std::string& file) {
  auto fail = [&](const std::string& why) {
    throw Error(ErrorCategory::tokenizer, file, std::string("post_processor: TemplateProcessing '") + which + "': " + why);
  };
  simdjson::dom::array pieces;
  if (e.get(pieces)) fail("not an array of pieces");
  std::vector<TemplatePiece> out;
  for (simdjson::dom::element piece : pieces) {
    std::string_view id;
    simdjson::dom::element body;
    if (!piece["Sequence"].get(body)) {
      if (body["id"].get(id) || (id != "A" && id != "B")) fail("a Sequence piece's id must be \"A\" or \"B\"");
      out.push_back({id == "A" ? TemplatePiece::Kind::sequence_a : TemplatePiece::Kind::sequence_b, {}});
    } else if (!piece["SpecialToken"].get(body)) {
      if (body["id"].get(id)) fail("a SpecialToken piece has no string id");
      out.push_back({TemplatePiece::Kind::special, std::string(id)});
    } else {
      fail("a piece is neither a Sequence nor a SpecialToken");
    }
  }
  return out;
}

// {"<name>": {"id": "<name>", "ids": [...], "tokens": [...]}, ...}
inline void parse_special_tokens(simdjson::dom::element e, PostProcessorSpec& spec, const std::string& file) {
  simdjson::dom::object map;
  if (e.get(map)) throw Error(ErrorCategory::tokenizer, file, "post_processor: special_tokens is not an object");
  for (auto field : map) {
    const std::string name(field.key);
    simdjson::dom::array ids, tokens;
    if (field.value["ids"].get(ids) || field.value["tokens"].get(tokens) || ids.size() != tokens.size())
      throw Error(ErrorCategory::tokenizer, file, "post_processor: special token '" + name + "' needs 'ids' and 'tokens' of equal length");
    std::vector<int> out;
    for (simdjson::dom::element id : ids) {
      std::int64_t v = -1;
      if (id.get(v) || v < 0 || v > INT32_MAX)
        throw Error(ErrorCategory::tokenizer, file, "post_processor: special token '" + name + "' has an id that is not a token id");
      out.push_back(static_cast<int>(v));
    }
    spec.special_tokens.emplace_back(name, std::move(out));
  }
}

// BertProcessing / RobertaProcessing: "cls" and "sep" as ["<token>", id]; the same as a template.
inline void parse_cls_sep(simdjson::dom::element e, bool roberta, PostProcessorSpec& spec, const std::string& file) {
  std::vector<TemplatePiece> names;
  for (const char* key : {"cls", "sep"}) {
    simdjson::dom::array pair;
    std::string_view token;
    std::int64_t id = -1;
    if (e[key].get(pair) || pair.size() != 2 || pair.at(0).get(token) || pair.at(1).get(id) || id < 0 || id > INT32_MAX)
      throw Error(ErrorCategory::tokenizer, file, std::string("post_processor: '") + key + "' must be [\"<token>\", id]");
    spec.special_tokens.emplace_back(std::string(token), std::vector<int>{static_cast<int>(id)});
    names.push_back({TemplatePiece::Kind::special, std::string(token)});
  }
  const TemplatePiece cls = names[0], sep = names[1], a{TemplatePiece::Kind::sequence_a, {}}, b{TemplatePiece::Kind::sequence_b, {}};
  spec.single = {cls, a, sep};
  spec.pair = roberta ? std::vector<TemplatePiece>{cls, a, sep, sep, b, sep} : std::vector<TemplatePiece>{cls, a, sep, b, sep};
}

// Adds processor `e` to `spec`. HF's TemplateProcessing hands its output on as one encoding per
// piece, which a second template cannot take, so a chain holds at most one template-like step.
inline void parse_post_processor_step(simdjson::dom::element e, PostProcessorSpec& spec, bool& has_template, const std::string& file) {
  std::string_view type = "?";
  if (e.is_null()) return;
  if (e["type"].get(type)) throw Error(ErrorCategory::tokenizer, file, "post_processor: a processor has no 'type'");
  if (type == "ByteLevel") return;  // trims offsets only
  if (type == "Sequence") {
    simdjson::dom::array steps;
    if (e["processors"].get(steps)) throw Error(ErrorCategory::tokenizer, file, "post_processor: Sequence has no 'processors' array");
    for (simdjson::dom::element step : steps) parse_post_processor_step(step, spec, has_template, file);
    return;
  }
  if (type != "TemplateProcessing" && type != "BertProcessing" && type != "RobertaProcessing")
    throw Error(ErrorCategory::tokenizer, file, "unsupported post_processor '" + std::string(type) +
                                                    "' (TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence or null)");
  if (has_template)
    throw Error(ErrorCategory::tokenizer, file, "post_processor: a Sequence may hold only one processor that adds tokens");
  has_template = true;
  spec.type = std::string(type);
  if (type != "TemplateProcessing") return parse_cls_sep(e, type == "RobertaProcessing", spec, file);
  simdjson::dom::element single, pair, special;
  if (e["single"].get(single) || e["pair"].get(pair) || e["special_tokens"].get(special))
    throw Error(ErrorCategory::tokenizer, file, "post_processor: TemplateProcessing needs 'single', 'pair' and 'special_tokens'");
  spec.single = parse_template(single, "single", file);
  spec.pair = parse_template(pair, "pair", file);
  parse_special_tokens(special, spec, file);
  for (const TemplatePiece& p : spec.single)
    if (p.kind == TemplatePiece::Kind::sequence_b)
      throw Error(ErrorCategory::tokenizer, file, "post_processor: TemplateProcessing 'single' uses sequence B");
}

inline PostProcessorSpec parse_post_processor(simdjson::dom::element e, const std::string& file) {
  PostProcessorSpec spec;
  bool has_template = false;
  parse_post_processor_step(e, spec, has_template, file);
  return spec;
}

}  // namespace kylin::detail
