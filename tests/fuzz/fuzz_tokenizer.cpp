// libFuzzer target, two modes picked by the first byte. Even: the rest, as arbitrary bytes, is
// encoded by the real Qwen3 tokenizer (tests/data/qwen3-tokenizer, loaded once), or with bit 1
// set by the same BPE behind the Qwen3.5 split: invalid UTF-8 is a kylin::Error, valid text
// round-trips to its NFC form, and streaming decode equals decode.
// Odd: the rest is a tokenizer.json; loading throws kylin::Error or gives a tokenizer that
// encodes (with and without its post-processor) and decodes without crashing. A crash, hang or
// sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/tokenizer/stream_decoder.hpp"
#include "kylin/tokenizer/tokenizer.hpp"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

std::unique_ptr<kylin::Tokenizer> qwen3, qwen3_bpe_qwen35_split;

bool valid_ids(const kylin::Tokenizer& t, const std::vector<int>& ids) {
  for (int id : ids)
    if (id < 0 || id >= t.vocab_size()) return false;
  return true;
}

// Streaming the ids one by one gives the same text as decoding them at once.
void check_stream(const kylin::Tokenizer& t, const std::vector<int>& ids) {
  kylin::StreamDecoder stream(t);
  std::string text;
  for (int id : ids) text += stream.push(id);
  text += stream.flush();
  require(text == t.decode(ids));
}

void encode_real(const kylin::Tokenizer& t, std::string_view text) {
  const bool valid = kylin::detail::find_invalid_utf8(text) == std::string_view::npos;
  std::vector<int> ids;
  try {
    ids = t.encode(text);
  } catch (const kylin::Error&) {
    require(!valid);  // the only refusal is invalid UTF-8
    return;
  }
  require(valid && valid_ids(t, ids));
  check_stream(t, ids);
  // Without added tokens the whole text is NFC'd, split (the pieces must tile it), then
  // byte-level BPE: nothing is lost.
  const auto plain = t.encode(text, {.parse_special = false, .parse_added = false});
  require(valid_ids(t, plain) && t.decode(plain) == kylin::nfc(text));
}

void load_and_use(std::string_view json) {
  const simdjson::padded_string padded(json.data(), json.size());
  std::unique_ptr<kylin::Tokenizer> t;
  try {
    t = std::make_unique<kylin::Tokenizer>(kylin::detail::parse_tokenizer_json(padded, "fuzz tokenizer.json"));
  } catch (const kylin::Error&) {
    return;
  }
  for (std::string_view text : {std::string_view("Hello, world! 你好 <|im_start|>user\n\u00e9e\u0301"), json.substr(0, 256)}) {
    try {
      const auto ids = t->encode(text);
      require(valid_ids(*t, ids));
      check_stream(*t, ids);
      // The post-processor's ids were checked against the vocabulary at load.
      require(valid_ids(*t, t->encode(text, {.add_special_tokens = true})));
      require(valid_ids(*t, t->encode_pair(text, text, {.add_special_tokens = true})));
    } catch (const kylin::Error&) {
      // invalid UTF-8, or a text the vocabulary cannot spell: refused by name
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto spec = kylin::detail::load_tokenizer_json(KYLIN_FUZZ_DATA "/qwen3-tokenizer/tokenizer.json");
  qwen3 = std::make_unique<kylin::Tokenizer>(spec);
  spec.split = kylin::SplitPattern::qwen35;
  qwen3_bpe_qwen35_split = std::make_unique<kylin::Tokenizer>(std::move(spec));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) encode_real(data[0] & 2 ? *qwen3_bpe_qwen35_split : *qwen3, rest);
  else load_and_use(rest);
  return 0;
}
