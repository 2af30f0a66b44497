// Session: prefix reuse, stop conditions, streaming pieces, reproducible seeds; the channel
// router and stop-string filter on their own.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kylin/generate/session.hpp"

namespace {

const std::string chat_model = std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen3-chat";

kylin::json::Value user(const std::string& text) {
  kylin::json::Value m = kylin::json::Object{};
  m.set("role", "user");
  m.set("content", text);
  return m;
}

kylin::json::Value assistant(const std::string& text) {
  kylin::json::Value m = kylin::json::Object{};
  m.set("role", "assistant");
  m.set("content", text);
  return m;
}

kylin::GenerateOptions greedy(std::int64_t n) {
  kylin::GenerateOptions o;
  o.sampling.greedy = true;
  o.max_new_tokens = n;
  return o;
}

kylin::Engine& engine() {
  static auto e = kylin::Engine::load(chat_model, {.threads = 2, .max_chunk = 512, .context_length = 1024});
  return *e;
}

// The library's greedy path without the Session: argmax over Model logits.
std::vector<int> manual_greedy(const std::vector<int>& prompt, int n, kylin::Engine& e = engine()) {
  auto& model = e.model();
  auto cache = model.new_cache(1024);
  auto logits = model.logits_last(prompt, cache);
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    const int id = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (e.is_eos(id)) break;
    out.push_back(id);
    logits = model.logits_last(std::vector<int>{id}, cache);
  }
  return out;
}

}  // namespace

TEST_CASE("greedy chat output is the detokenized argmax continuation of the rendered prompt") {
  kylin::Session session(engine());
  kylin::json::Value messages = kylin::json::Array{user("What is 2+2?")};
  const kylin::ChatOptions no_think{.enable_thinking = false, .tools = {}, .extra_kwargs = {}};
  const std::string prompt = session.render_chat(messages, no_think);
  CHECK(prompt == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  std::string streamed;
  auto o = greedy(16);
  o.on_piece = [&](const kylin::Piece& p) {
    CHECK(p.channel == kylin::Channel::answer);
    streamed += p.text;
    return true;
  };
  const auto result = session.chat(messages, no_think, o);
  const auto expected = manual_greedy(engine().tokenizer().encode(prompt), 16);
  CHECK(result.tokens == expected);
  CHECK(result.content == engine().tokenizer().decode(expected));
  CHECK(streamed == result.content);
  CHECK(result.stats.prompt_tokens == static_cast<std::int64_t>(engine().tokenizer().encode(prompt).size()));
  CHECK(result.stats.generated_tokens == static_cast<std::int64_t>(expected.size()));
}

TEST_CASE("a second turn reuses the cached prefix and prefills only the new tokens, with identical output") {
  kylin::Session session(engine());
  const kylin::ChatOptions opts{.enable_thinking = false, .tools = {}, .extra_kwargs = {}};
  kylin::json::Value messages = kylin::json::Array{user("Hello")};
  const auto first = session.chat(messages, opts, greedy(8));
  CHECK(first.stats.cached_tokens == 0);
  messages.push_back(assistant(first.content));
  messages.push_back(user("And then?"));
  const auto second = session.chat(messages, opts, greedy(8));
  CHECK(second.stats.cached_tokens > first.stats.prompt_tokens / 2);
  CHECK(second.stats.prefill_tokens == second.stats.prompt_tokens - second.stats.cached_tokens);
  kylin::Session fresh(engine());
  const auto again = fresh.chat(messages, opts, greedy(8));
  CHECK(again.stats.cached_tokens == 0);
  CHECK(again.tokens == second.tokens);
}

TEST_CASE("a stop string spanning tokens ends the answer before it and is not emitted") {
  kylin::Session session(engine());
  const auto full = session.complete("Once upon a time", greedy(24));
  REQUIRE(full.content.size() > 12);
  // A stop string that starts inside one token's text and ends in a later one.
  const std::string stop = full.content.substr(5, 6);
  auto o = greedy(24);
  o.stop = {stop};
  std::string streamed;
  o.on_piece = [&](const kylin::Piece& p) {
    streamed += p.text;
    return true;
  };
  const auto cut = session.complete("Once upon a time", o);
  CHECK(cut.stop_reason == kylin::StopReason::stop_string);
  CHECK(cut.content == full.content.substr(0, full.content.find(stop)));
  CHECK(streamed == cut.content);
}

TEST_CASE("limits stop cleanly: max_new_tokens, context full, and a callback returning false") {
  kylin::Session session(engine());
  const auto limited = session.complete("abc", greedy(5));
  CHECK(limited.stop_reason == kylin::StopReason::max_tokens);
  CHECK(limited.tokens.size() == 5);

  kylin::Session small(engine(), 12);
  const auto prompt = engine().tokenizer().encode("one two three");
  const auto full = small.complete("one two three", greedy(100));
  CHECK(full.stop_reason == kylin::StopReason::context_full);
  CHECK(static_cast<std::int64_t>(prompt.size() + full.tokens.size()) == 13);  // last sampled token is never fed
  CHECK_THROWS_WITH_AS(small.complete(std::string(200, 'x') + " y z w v u t s r q p o", greedy(4)),
                       doctest::Contains("leaves no room in the context of 12 tokens"), kylin::Error);

  auto o = greedy(50);
  int pieces = 0;
  o.on_piece = [&](const kylin::Piece&) { return ++pieces < 3; };
  const auto cancelled = session.complete("Hello world", o);
  CHECK(cancelled.stop_reason == kylin::StopReason::cancelled);
  CHECK(pieces == 3);
}

TEST_CASE("seeded sampling is reproducible and different seeds differ") {
  kylin::Session a(engine()), b(engine());
  kylin::GenerateOptions o;
  o.max_new_tokens = 24;
  o.sampling.temperature = 1.0f;
  o.sampling.seed = 1234;
  const auto x = a.complete("The weather", o);
  const auto y = b.complete("The weather", o);
  CHECK(x.tokens == y.tokens);
  o.sampling.seed = 99;
  const auto z = b.complete("The weather", o);
  CHECK(z.tokens != x.tokens);
}

TEST_CASE("engine: eos ids come from config and the tokenizer's end-of-turn tokens; defaults from generation_config") {
  const auto& eos = engine().eos_ids();
  CHECK(std::find(eos.begin(), eos.end(), 151645) != eos.end());  // <|im_end|>, config.json
  CHECK(std::find(eos.begin(), eos.end(), 151643) != eos.end());  // <|endoftext|>
  CHECK(engine().default_sampling().is_greedy());  // no generation_config.json: transformers' do_sample=False
}

TEST_CASE("channel router: <think> text goes to reasoning with edge newlines trimmed, answer follows") {
  std::string answer, reasoning, streamed;
  std::function<bool(const kylin::Piece&)> cb = [&](const kylin::Piece& p) {
    streamed += p.channel == kylin::Channel::reasoning ? "R:" : "A:";
    streamed += p.text;
    return true;
  };
  kylin::ChannelRouter r(cb, {}, answer, reasoning, kylin::Channel::answer);
  r.switch_to(kylin::Channel::reasoning);
  r.text("\n");
  r.text("Let me");
  r.text(" think.\n");
  r.text("\n");
  r.switch_to(kylin::Channel::answer);
  r.text("\n\n");
  r.text("Four.");
  r.finish();
  CHECK(reasoning == "Let me think.");
  CHECK(answer == "Four.");
  CHECK(streamed == "R:Let meR: think.A:Four.");
  CHECK(kylin::Session::opens_reasoning("<|im_start|>assistant\n<think>\n"));
  CHECK_FALSE(kylin::Session::opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  CHECK_FALSE(kylin::Session::opens_reasoning("<|im_start|>assistant\n"));
}

TEST_CASE("stop-string filter holds back partial matches and releases them when they fail") {
  kylin::StopStringFilter f({"STOP", "END"});
  CHECK(f.push("abc ST") == "abc ");
  CHECK(f.push("ARS") == "STAR");  // the last S could still start STOP
  CHECK(f.push(" E") == "S ");
  CHECK(f.push("N") == "");
  CHECK(f.flush() == "EN");
  kylin::StopStringFilter g({"STOP"});
  CHECK(g.push("xxST") == "xx");
  CHECK(g.push("OPyy") == "");
  CHECK(g.stopped());
  CHECK(g.flush() == "");
}

TEST_CASE("an engine loaded with kv_dtype f16 gives its sessions f16 caches and still answers the argmax continuation") {
  auto e16 = kylin::Engine::load(chat_model, {.threads = 2, .max_chunk = 512, .context_length = std::nullopt,
                                              .kv_dtype = kylin::KVDType::f16});
  CHECK(e16->model().kv_dtype() == kylin::KVDType::f16);
  CHECK(e16->context_length() == kylin::default_context_length(e16->model().config(), kylin::KVDType::f16));
  kylin::Session session(*e16, 256);
  CHECK(session.cache().dtype() == kylin::KVDType::f16);
  const kylin::ChatOptions no_think{.enable_thinking = false, .tools = {}, .extra_kwargs = {}};
  kylin::json::Value messages = kylin::json::Array{user("What is 2+2?")};
  const auto ids = e16->tokenizer().encode(session.render_chat(messages, no_think));
  const auto result = session.chat(messages, no_think, greedy(12));
  CHECK(result.tokens == manual_greedy(ids, 12, *e16));  // the same f16 model, token by token
}
