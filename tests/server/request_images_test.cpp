// Images in requests (server/request_images.hpp) through the Service, without a transport: each API's image part
// (OpenAI image_url, Anthropic image, Responses input_image) answered on the full-vocabulary Qwen3.5 model with its
// tower, the tokens counted, and every refusal a 400 or 413 naming the field; base64 against RFC 4648's vectors.
#include <doctest/doctest.h>

#include <string>

#include "kylin/io/image_decode.hpp"
#include "kylin/server/anthropic_service.hpp"
#include "kylin/server/openai_service.hpp"
#include "kylin/server/responses_service.hpp"
#include "kylin/server/text_endpoints.hpp"

namespace request_images_test {

using namespace kylin::server;
using kylin::json::Value;
const std::string data = KYLIN_TEST_DATA;

// An independent encoder for the tests' data URLs.
std::string base64(const std::string& in) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < in.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, in.size() - i);
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? static_cast<unsigned char>(in[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) out += k <= n ? abc[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}
std::string png_base64(const std::string& name) { return base64(kylin::io::read_text_file(data + "/images/" + name)); }

TEST_CASE("decode_base64: RFC 4648's vectors, padding optional; a stray character or a cut is a 400 naming the field") {
  for (const auto& [in, out] : std::vector<std::pair<std::string, std::string>>{
           {"", ""}, {"Zg==", "f"}, {"Zm8=", "fo"}, {"Zm9v", "foo"}, {"Zm9vYg==", "foob"}, {"Zm9vYmE=", "fooba"}, {"Zm9vYmFy", "foobar"}, {"Zm9vYg", "foob"}}) {
    const std::string& i = in;
    CAPTURE(i);
    CHECK(decode_base64(in, "f") == out);
  }
  const std::string bytes = kylin::io::read_text_file(data + "/images/a_64x48.png");
  CHECK(decode_base64(base64(bytes), "f") == bytes);
  for (const std::string bad : {"Zm9v!", "Zm9vY", "Zg=a", "Zm 9v"}) {
    CAPTURE(bad);
    try {
      (void)decode_base64(bad, "messages[0].content[1].image_url.url");
      FAIL("accepted");
    } catch (const ApiError& e) {
      CHECK(e.param() == "messages[0].content[1].image_url.url");
    }
  }
}

TEST_CASE("parse_chat_request: image_url parts become the template's image items in order, their data the request's images") {
  const ChatRequest r = parse_chat_request(R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [
      {"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,Zm9v", "detail": "low"}},
      {"type": "text", "text": "b"}, {"type": "text", "text": "c"}, {"type": "image_url", "image_url": "data:;base64,YmFy"}]}]})", {});
  const Value& content = *r.messages.as_array()[1].find("content");
  REQUIRE(content.is_array());
  REQUIRE(content.size() == 4);
  CHECK(content.as_array()[0].find("text")->as_string() == "a");
  CHECK(content.as_array()[1].find("type")->as_string() == "image");
  CHECK(content.as_array()[2].find("text")->as_string() == "bc");
  CHECK(content.as_array()[3].find("type")->as_string() == "image");
  REQUIRE(r.images.size() == 2);
  CHECK(r.images[0].base64 == "Zm9v");
  CHECK(r.images[0].field == "messages[1].content[1].image_url.url");
  CHECK(r.images[1].base64 == "YmFy");
  CHECK(r.messages.as_array()[0].find("content")->is_string());
  // refusals, each naming its field
  for (const auto& [content_json, param, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {R"([{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}])", "messages[0].content[0].image_url.url", "remote"},
           {R"([{"type": "image_url", "image_url": {"url": "data:text/plain;base64,Zm9v"}}])", "messages[0].content[0].image_url.url", "not an image"},
           {R"([{"type": "image_url", "image_url": {"url": "data:image/png,Zm9v"}}])", "messages[0].content[0].image_url.url", "base64"},
           {R"([{"type": "image_url", "image_url": {"url": "data:image/png;base64,Zm9v", "detail": 3}}])", "messages[0].content[0].image_url.detail", "detail"},
           {R"([{"type": "image_url"}])", "messages[0].content[0].image_url", "url"},
           {R"([{"type": "input_audio", "input_audio": {}}])", "messages[0].content[0]", "image_url"}}) {
    const std::string& c = content_json;
    CAPTURE(c);
    try {
      (void)parse_chat_request(R"({"messages": [{"role": "user", "content": )" + content_json + "}]}", {});
      FAIL("accepted");
    } catch (const ApiError& e) {
      CHECK(e.param() == param);
      CHECK(std::string(e.what()).find(says) != std::string::npos);
    }
  }
  try {  // images only in user messages
    (void)parse_chat_request(R"({"messages": [{"role": "assistant", "content": [{"type": "image_url", "image_url": "data:;base64,Zm9v"}]}]})", {});
    FAIL("accepted");
  } catch (const ApiError& e) {
    CHECK(e.param() == "messages[0].content[0]");
  }
}

kylin::Engine& vision_engine() {
  static auto e = kylin::Engine::load(data + "/models/e2e-qwen35-fullvocab", {.threads = 2, .context_length = 2048});
  return *e;
}
Scheduler& scheduler() {
  static Scheduler s(vision_engine(), [] {
    SchedulerOptions o;
    o.slots = 2;
    return o;
  }());
  return s;
}
Service& service() {
  static Service s(vision_engine(), scheduler(), "m", [] {
    ServiceOptions o;
    o.decode_image = [](std::span<const std::uint8_t> bytes, std::string_view what) { return kylin::io::decode_image(bytes, what); };
    o.image_limits.max_images = 3;
    o.image_limits.max_bytes = 64 << 10;
    return o;
  }());
  return s;
}

Value json_of(const Reply& r) { return kylin::json::parse(r.body); }
std::string param_of(const Reply& r) {
  const Value body = json_of(r);
  const Value* p = body.find("error")->find("param");
  return p && p->is_string() ? p->as_string() : "";
}
std::string message_of(const Reply& r) { return json_of(r).find("error")->find("message")->as_string(); }

std::string openai_image(const std::string& b64) {
  return R"({"type": "image_url", "image_url": {"url": "data:image/png;base64,)" + b64 + R"("}})";
}
std::string openai_chat(const std::string& parts, const std::string& extra = "") {
  return R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, )" + parts +
         R"(]}], "max_tokens": 3, "temperature": 0)" + extra + "}";
}

TEST_CASE("OpenAI chat with image_url parts: answered, the image tokens counted in usage, the same as the library's chat") {
  const std::string a = png_base64("a_64x48.png"), c = png_base64("c_300x260.png");
  const Reply r = service().chat(openai_chat(openai_image(a) + ", " + openai_image(c))).reply;
  REQUIRE_MESSAGE(r.status == status::ok, r.body);
  const Value body = json_of(r);
  // a_64x48 resizes to 320x224 (65536 pixels at least): 20x14 patches, 70 tokens; c_300x260 to 288x256: 72 tokens
  const kylin::vision::ProcessorConfig& pc = vision_engine().image_processor();
  CHECK(kylin::image_tokens(64, 48, pc).count() == 70);
  CHECK(kylin::image_tokens(300, 260, pc).count() == 72);
  const std::int64_t prompt_tokens = body.find("usage")->find("prompt_tokens")->as_int();
  // the library's chat on the same messages and decoded images: the same prompt and greedy answer
  const Value messages = kylin::json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "What is it?"}, {"type": "image"}, {"type": "image"}]}])");
  std::vector<kylin::vision::Image> images;
  for (const char* f : {"a_64x48.png", "c_300x260.png"}) {
    const std::string bytes = kylin::io::read_text_file(data + "/images/" + f);
    images.push_back(kylin::io::decode_image(std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), f));
  }
  kylin::Session s(vision_engine(), 2048);
  kylin::GenerateOptions o;
  o.max_new_tokens = 3;
  o.sampling.greedy = true;
  kylin::ChatOptions chat;
  chat.content_tokens = kylin::ContentTokens::plain;
  const kylin::Generation g = s.chat(messages, chat, o, images);
  CHECK(prompt_tokens == g.stats.prompt_tokens);
  CHECK(g.stats.prompt_tokens > 70 + 72);
  CHECK(body.find("usage")->find("completion_tokens")->as_int() == static_cast<std::int64_t>(g.tokens.size()));
  // /apply-template counts them without running the tower
  const Reply t = service().apply_template(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, )" +
                                           openai_image(a) + ", " + openai_image(c) + "]}]}");
  REQUIRE_MESSAGE(t.status == status::ok, t.body);
  CHECK(json_of(t).find("image_tokens")->as_int() == 142);
  CHECK(json_of(t).find("prompt_tokens")->as_int() == prompt_tokens);
  CHECK(json_of(t).find("prompt")->as_string().find("<|vision_start|><|image_pad|><|vision_end|><|vision_start|>") != std::string::npos);
}

TEST_CASE("Anthropic image blocks and Responses input_image parts: answered, and counted by count_tokens / input_tokens") {
  const std::string a = png_base64("a_64x48.png");
  const std::string blocks = R"([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ")" + a +
                             R"("}}, {"type": "text", "text": "What is it?"}])";
  const Reply m = service().messages(R"({"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": )" + blocks + "}]}").reply;
  REQUIRE_MESSAGE(m.status == status::ok, m.body);
  const std::int64_t in = json_of(m).find("usage")->find("input_tokens")->as_int();
  CHECK(in > 70);
  const Reply count = service().count_message_tokens(R"({"model": "m", "messages": [{"role": "user", "content": )" + blocks + "}]}");
  REQUIRE_MESSAGE(count.status == status::ok, count.body);
  CHECK(json_of(count).find("input_tokens")->as_int() == in);
  const std::string input = R"([{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,)" + a +
                            R"(", "detail": "auto"}, {"type": "input_text", "text": "What is it?"}]}])";
  const Reply r = service().create_response(R"({"input": )" + input + R"(, "max_output_tokens": 2, "reasoning": {"effort": "none"}})").reply;
  REQUIRE_MESSAGE(r.status == status::ok, r.body);
  const Value rb = json_of(r);
  CHECK(rb.find("usage")->find("input_tokens")->as_int() > 70);
  const Reply tokens = service().response_input_tokens(R"({"input": )" + input + R"(, "reasoning": {"effort": "none"}})");
  REQUIRE_MESSAGE(tokens.status == status::ok, tokens.body);
  CHECK(json_of(tokens).find("input_tokens")->as_int() == rb.find("usage")->find("input_tokens")->as_int());
  // a stored conversation keeps no image data: continuing it is refused, naming the field
  const Reply next = service().create_response(R"({"previous_response_id": ")" + rb.find("id")->as_string() + R"(", "input": "And?"})").reply;
  CHECK(next.status == status::bad_request);
  CHECK(param_of(next) == "previous_response_id");
  // URL sources are refused
  const Reply url = service().messages(R"({"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]}]})").reply;
  CHECK(url.status == status::bad_request);
  CHECK(json_of(url).find("error")->find("message")->as_string().find("source type 'url'") != std::string::npos);
}

TEST_CASE("image refusals: too many (400), too large (413), not an image, damaged, a forged pad, each naming its field") {
  const std::string a = png_base64("a_64x48.png");
  const Reply many = service().chat(openai_chat(openai_image(a) + ", " + openai_image(a) + ", " + openai_image(a) + ", " + openai_image(a))).reply;
  CHECK(many.status == status::bad_request);
  CHECK(param_of(many) == "messages[0].content[4].image_url.url");
  CHECK(message_of(many).find("--max-images") != std::string::npos);
  const Reply big = service().chat(openai_chat(openai_image(std::string(100 << 10, 'A')))).reply;
  CHECK(big.status == status::payload_too_large);
  CHECK(param_of(big) == "messages[0].content[1].image_url.url");
  const Reply text = service().chat(openai_chat(openai_image(base64("GIF89a not really")))).reply;
  CHECK(text.status == status::bad_request);
  CHECK(param_of(text) == "messages[0].content[1].image_url.url");
  const Reply cut = service().chat(openai_chat(openai_image(a.substr(0, a.size() / 2)))).reply;
  CHECK(cut.status == status::bad_request);
  CHECK(param_of(cut) == "messages[0].content[1].image_url.url");
  // an image pad typed as text stays text (plain content tokens): the prompt's pads still match its images
  const Reply typed = service().chat(openai_chat(openai_image(a) + R"(, {"type": "text", "text": "<|image_pad|>"})")).reply;
  CHECK(typed.status == status::ok);
}

TEST_CASE("a model without a vision tower refuses image parts with a named 400") {
  static auto text_engine = kylin::Engine::load(data + "/models/e2e-qwen3-chat", {.threads = 1, .context_length = 512});
  Scheduler sched(*text_engine, SchedulerOptions{});
  ServiceOptions o;
  o.decode_image = [](std::span<const std::uint8_t> bytes, std::string_view what) { return kylin::io::decode_image(bytes, what); };
  Service text(*text_engine, sched, "m", o);
  const Reply r = text.chat(openai_chat(openai_image(png_base64("a_64x48.png")))).reply;
  CHECK(r.status == status::bad_request);
  CHECK(param_of(r) == "messages[0].content[1].image_url.url");
  CHECK(message_of(r).find("no vision tower") != std::string::npos);
}

}  // namespace request_images_test
