// tokenizer.json's post_processor, as HF tokenizers applies it with add_special_tokens=True:
// TemplateProcessing single and pair templates (multi-id special tokens), Bert/Roberta, ByteLevel
// and Sequence; encode() without the option is unchanged; bad processors are load errors naming the part.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tokenizer_test_util.hpp"

using kylin::test::error_text;

namespace {

// A byte-level tokenizer.json (byte b = id b, "ab" = 256) with added tokens [CLS] 300, [SEP] 301,
// <|endoftext|> 302, and the given post_processor JSON.
kylin::Tokenizer with_post_processor(const std::string& post_processor) {
  kylin::json::Value vocab = kylin::json::Object{};
  for (int b = 0; b < 256; ++b) vocab.set(kylin::detail::bytes_to_token_text(std::string(1, static_cast<char>(b))), b);
  vocab.set("ab", 256);
  const std::vector<std::string> names{"[CLS]", "[SEP]", "<|endoftext|>"};
  std::string added = "[";
  for (std::size_t i = 0; i < names.size(); ++i)
    added += (i ? ", " : "") + (R"({"id": )" + std::to_string(300 + i)) + R"(, "content": ")" + names[i] + R"(", "special": true})";
  added += "]";
  const std::string text = R"({"added_tokens": )" + added + R"(, "normalizer": null, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [)" +
                           R"({"type": "Split", "pattern": {"Regex": )" + kylin::json::dump(kylin::json::Value(kylin::detail::qwen2_split_pattern)) +
                           R"(}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},)" +
                           R"( "post_processor": )" + post_processor + R"(, "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": )" +
                           kylin::json::dump(vocab) + R"(, "merges": ["a b"]}})";
  return kylin::Tokenizer(kylin::detail::parse_tokenizer_json(simdjson::padded_string(text), "t.json"));
}

const std::string bert_template = R"({"type": "TemplateProcessing",
  "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
  "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
           {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "[2SEP]", "type_id": 1}}],
  "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [300], "tokens": ["[CLS]"]}, "[SEP]": {"id": "[SEP]", "ids": [301], "tokens": ["[SEP]"]},
                     "[2SEP]": {"id": "[2SEP]", "ids": [301, 302], "tokens": ["[SEP]", "<|endoftext|>"]}}})";

}  // namespace

TEST_CASE("post_processor TemplateProcessing: single wraps A, pair wraps A and B with a multi-id special token; plain encode adds nothing") {
  const kylin::Tokenizer t = with_post_processor(bert_template);
  CHECK(t.encode("ab c") == std::vector<int>{256, 32, 99});  // "ab", then " c" as its two bytes
  CHECK(t.encode("ab c", {.add_special_tokens = true}) == std::vector<int>{300, 256, 32, 99, 301});
  CHECK(t.encode_pair("ab", "c", {.add_special_tokens = true}) == std::vector<int>{300, 256, 301, 99, 301, 302});
  CHECK(t.encode_pair("ab", "c") == std::vector<int>{256, 99});
  CHECK(t.post_processor().process(std::vector<int>{}) == std::vector<int>{300, 301});
}

TEST_CASE("post_processor Bert, Roberta, ByteLevel, null and Sequence[ByteLevel, Template] give HF's ids") {
  const std::string cls_sep = R"("sep": ["[SEP]", 301], "cls": ["[CLS]", 300])";
  const auto bert = with_post_processor(R"({"type": "BertProcessing", )" + cls_sep + "}");
  CHECK(bert.encode_pair("a", "b", {.add_special_tokens = true}) == std::vector<int>{300, 97, 301, 98, 301});
  const auto roberta = with_post_processor(R"({"type": "RobertaProcessing", "trim_offsets": true, "add_prefix_space": false, )" + cls_sep + "}");
  CHECK(roberta.encode_pair("a", "b", {.add_special_tokens = true}) == std::vector<int>{300, 97, 301, 301, 98, 301});
  CHECK(roberta.encode("a", {.add_special_tokens = true}) == std::vector<int>{300, 97, 301});
  for (const std::string& none : {std::string(R"({"type": "ByteLevel", "trim_offsets": false})"), std::string("null")}) {
    const auto t = with_post_processor(none);
    CHECK(t.encode("a", {.add_special_tokens = true}) == std::vector<int>{97});
    CHECK(t.encode_pair("a", "b", {.add_special_tokens = true}) == std::vector<int>{97, 98});
  }
  const auto chained = with_post_processor(R"({"type": "Sequence", "processors": [{"type": "ByteLevel"}, )" + bert_template + "]}");
  CHECK(chained.encode("a", {.add_special_tokens = true}) == std::vector<int>{300, 97, 301});
}

TEST_CASE("post_processor errors at load name the part: undefined or out-of-vocab special token, unknown type, malformed pieces") {
  auto replaced = [](std::string from, const std::string& to) {
    std::string s = bert_template;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  CHECK(error_text([&] { with_post_processor(replaced(R"({"id": "[CLS]", "type_id": 0}}, {"Sequence")", R"({"id": "[MASK]", "type_id": 0}}, {"Sequence")")); }) ==
        "[kylin.tokenizer] t.json: post_processor: the single template uses special token '[MASK]', which its special_tokens do not define");
  CHECK(error_text([&] { with_post_processor(replaced("[301, 302]", "[301, 999]")); }) ==
        "[kylin.tokenizer] t.json: post_processor: special token '[2SEP]' has id 999, which is not in the vocabulary");
  CHECK(error_text([&] { with_post_processor(R"({"type": "Whatever"})"); }).find("unsupported post_processor 'Whatever'") != std::string::npos);
  CHECK(error_text([&] { with_post_processor(replaced(R"("id": "B")", R"("id": "C")")); }).find("must be \"A\" or \"B\"") != std::string::npos);
  CHECK(error_text([&] { with_post_processor(replaced(R"("ids": [300], "tokens": ["[CLS]"])", R"("ids": [300])")); })
            .find("special token '[CLS]' needs 'ids' and 'tokens'") != std::string::npos);
  CHECK(error_text([&] { with_post_processor(R"({"type": "Sequence", "processors": [)" + bert_template + "," + bert_template + "]}"); })
            .find("only one processor that adds tokens") != std::string::npos);
  CHECK(error_text([&] { with_post_processor(R"({"type": "TemplateProcessing", "single": [{"Sequence": {"id": "B", "type_id": 0}}], "pair": [], "special_tokens": {}})"); })
            .find("'single' uses sequence B") != std::string::npos);
}
