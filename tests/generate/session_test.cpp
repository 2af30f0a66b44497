// Session: prefix reuse, stop conditions, streaming pieces, reproducible seeds, only tokenizer
// ids sampled whatever the logits and temperature; the channel router and stop-string filter.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "kylin/generate/session.hpp"

namespace session_test {

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
  static auto e = kylin::Engine::load(chat_model, {.threads = 2, .max_pass_rows = 512, .context_length = 1024});
  return *e;
}

// The argmax over the logits of ids the tokenizer can decode (lowest id on ties): the model
// has more rows than the tokenizer has tokens, and those ids must never be generated.
int argmax_token(const std::vector<float>& logits, const kylin::Tokenizer& tokenizer) {
  int best = -1;
  for (int id = 0; id < static_cast<int>(logits.size()); ++id)
    if (tokenizer.id_to_token(id) && (best < 0 || logits[static_cast<std::size_t>(id)] > logits[static_cast<std::size_t>(best)]))
      best = id;
  return best;
}

// The library's greedy path without the Session: argmax over Model logits, tokens only;
// `bias` edits each row first, as GenerateOptions::on_logits does.
std::vector<int> manual_greedy(const std::vector<int>& prompt, int n, kylin::Engine& e = engine(),
                               const std::function<void(std::span<float>)>& bias = {}) {
  auto& model = e.model();
  auto cache = model.new_cache(1024);
  auto logits = model.logits_last(prompt, cache);
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    if (bias) bias(logits);
    const int id = argmax_token(logits, e.tokenizer());
    if (e.is_eos(id)) break;
    out.push_back(id);
    logits = model.logits_last(std::vector<int>{id}, cache);
  }
  return out;
}


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
  auto e16 = kylin::Engine::load(chat_model, {.threads = 2, .max_pass_rows = 512, .context_length = std::nullopt,
                                              .kv_dtype = kylin::DType::f16});
  CHECK(e16->model().kv_dtype() == kylin::DType::f16);
  CHECK(e16->context_length() == kylin::default_context_length(e16->model().config(), kylin::DType::f16));
  kylin::Session session(*e16, 256);
  CHECK(session.cache().dtype() == kylin::DType::f16);
  const kylin::ChatOptions no_think{.enable_thinking = false, .tools = {}, .extra_kwargs = {}};
  kylin::json::Value messages = kylin::json::Array{user("What is 2+2?")};
  const auto ids = e16->tokenizer().encode(session.render_chat(messages, no_think));
  const auto result = session.chat(messages, no_think, greedy(12));
  CHECK(result.tokens == manual_greedy(ids, 12, *e16));  // the same f16 model, token by token
}

TEST_CASE("greedy never yields an id past the tokenizer, though this random checkpoint's argmax after token 1116 is one") {
  const int n_tokens = engine().tokenizer().vocab_size();
  const std::vector<int> prompt = {1116};
  auto cache = engine().model().new_cache(16);
  const auto logits = engine().model().logits_last(prompt, cache);
  REQUIRE(std::max_element(logits.begin(), logits.end()) - logits.begin() >= n_tokens);  // a row that is no token
  kylin::Session session(engine());
  auto o = greedy(6);
  o.ignore_eos = true;
  const auto g = session.generate(prompt, o);  // used to fail decoding: "token id 151749 is not in the vocabulary"
  REQUIRE(g.tokens.size() == 6);
  CHECK(g.tokens.front() == argmax_token(logits, engine().tokenizer()));
  CHECK(g.tokens == manual_greedy(prompt, 6));
}

TEST_CASE("plain greedy steps take only the forward's greedy id (cut at the tokenizer), steps anything looks at the row for take the row, with the same tokens") {
  const auto prompt = engine().tokenizer().encode("Once upon a time");
  kylin::Session session(engine());
  auto o = greedy(10);
  o.ignore_eos = true;
  {
    kylin::GenerationRun run(session, prompt, o, kylin::Channel::answer);
    const kylin::SequenceInput in = run.input();
    CHECK(in.out.logits.empty());
    CHECK(in.out.greedy.size() == 1);
    CHECK(in.out.pick_end == static_cast<std::int64_t>(engine().sampleable_ids().end()));
  }
  const auto by_ids = session.generate(prompt, o);
  int rows_seen = 0;
  o.on_logits = [&](std::span<float>) { ++rows_seen; };
  {
    kylin::GenerationRun run(session, prompt, o, kylin::Channel::answer);
    CHECK(run.input().out.greedy.empty());
  }
  const auto by_rows = session.generate(prompt, o);
  CHECK(rows_seen == 10);
  CHECK(by_ids.tokens.size() == 10);
  CHECK(by_ids.tokens == by_rows.tokens);
}

TEST_CASE("plain top-k sampling steps take only the forward's top-k (cut at the tokenizer), and draw the tokens a draw from the whole row gives") {
  const auto prompt = engine().tokenizer().encode("Once upon a time");
  kylin::Session session(engine());
  kylin::GenerateOptions o;
  o.max_new_tokens = 12;
  o.ignore_eos = true;
  o.sampling.temperature = 1.5f;
  o.sampling.top_k = 40;
  o.sampling.top_p = 0.9f;
  o.sampling.seed = 4321;
  {
    kylin::GenerationRun run(session, prompt, o, kylin::Channel::answer);
    const kylin::SequenceInput in = run.input();
    CHECK(in.out.logits.empty());
    CHECK(in.out.greedy.empty());
    CHECK(in.out.top_k == 40);
    CHECK(in.out.top.size() == 40);
    CHECK(in.out.pick_end == static_cast<std::int64_t>(engine().sampleable_ids().end()));
  }
  const auto by_top = session.generate(prompt, o);
  int rows_seen = 0;
  o.on_logits = [&](std::span<float>) { ++rows_seen; };
  {
    kylin::GenerationRun run(session, prompt, o, kylin::Channel::answer);
    CHECK(run.input().out.top.empty());
  }
  const auto by_rows = session.generate(prompt, o);
  CHECK(rows_seen == 12);
  CHECK(by_top.tokens.size() == 12);
  CHECK(by_top.tokens == by_rows.tokens);
  o.on_logits = nullptr;
  o.sampling.top_k = 0;  // top-p over the whole row needs the row
  kylin::GenerationRun run(session, prompt, o, kylin::Channel::answer);
  CHECK(run.input().out.top.empty());
}

TEST_CASE("sampling by temperature, top-p and min-p alone takes the forward's draws, not the row, and draws the tokens the row gives (prompt in chunks too)") {
  const auto prompt = engine().tokenizer().encode("Once upon a time there was");
  kylin::Session session(engine());
  for (const float top_p : {1.0f, 0.9f}) {
    CAPTURE(top_p);
    kylin::GenerateOptions o;
    o.max_new_tokens = 12;
    o.ignore_eos = true;
    o.sampling.temperature = 1.3f;
    o.sampling.top_k = 0;  // the checkpoint's generation_config asks for top-k and top-p
    o.sampling.top_p = top_p;
    o.sampling.min_p = 0.02f;
    o.sampling.seed = 99;
    {
      kylin::GenerationRun run(session, prompt, o, kylin::Channel::answer);
      const kylin::SequenceInput in = run.input();
      CHECK(in.out.logits.empty());
      CHECK(in.out.drawn.size() == 1);
      CHECK(in.out.draws.size() == 1);
      CHECK(in.out.draws[0].inv_temperature == 1.0f / 1.3f);
      CHECK(in.out.draws[0].min_weight == 0.02f);
      CHECK(in.out.draws[0].top_p == top_p);
      CHECK(run.input().out.draws[0] == in.out.draws[0]);  // asked twice in a step, the same draw
      CHECK(in.out.pick_end == static_cast<std::int64_t>(engine().sampleable_ids().end()));
    }
    const auto by_draws = session.generate(prompt, o);
    // The prompt two tokens a pass: each pass asks for a draw; only the last one's is used.
    std::vector<int> chunked;
    {
      kylin::GenerationRun run(session, prompt, o, kylin::Channel::answer, 2);
      while (!run.done()) {
        const kylin::SequenceInput in = run.input();
        engine().model().forward(std::span<const kylin::SequenceInput>(&in, 1));
        run.advance();
      }
      chunked = run.finish().tokens;
    }
    int rows_seen = 0;
    o.on_logits = [&](std::span<float>) { ++rows_seen; };
    const auto by_rows = session.generate(prompt, o);
    CHECK(rows_seen == 12);
    REQUIRE(by_draws.tokens.size() == 12);
    CHECK(by_draws.tokens == by_rows.tokens);
    CHECK(chunked == by_rows.tokens);
  }
}

TEST_CASE("ids the tokenizer cannot decode are never generated, even when a logit hook makes them win") {
  const int n_tokens = engine().tokenizer().vocab_size();
  const auto rows = static_cast<std::size_t>(engine().model().vocab_size());
  REQUIRE(rows > static_cast<std::size_t>(n_tokens));  // 151,936 lm_head rows, 151,669 tokens
  CHECK(engine().sampleable_ids().end() == static_cast<std::size_t>(n_tokens));
  int hook_calls = 0;
  // Every row past the tokenizer outweighs every token: +inf, a huge finite value, NaN.
  const std::function<void(std::span<float>)> favour_no_token = [&](std::span<float> logits) {
    ++hook_calls;
    for (std::size_t i = static_cast<std::size_t>(n_tokens); i < logits.size(); ++i)
      logits[i] = i % 3 == 0 ? std::numeric_limits<float>::infinity() : i % 3 == 1 ? 1e30f : std::nanf("");
  };
  kylin::Session session(engine());
  auto o = greedy(12);
  o.ignore_eos = true;
  o.on_logits = favour_no_token;
  const auto prompt = engine().tokenizer().encode("Once upon a time");
  const auto g = session.generate(prompt, o);
  CHECK(hook_calls == 12);
  CHECK(g.tokens == manual_greedy(prompt, 12, engine(), favour_no_token));  // the argmax among tokens
  for (const float t : {1.0f, 5.0f}) {  // sampling: near-uniform at 5, where the mass past the tokenizer would be large
    o.sampling.greedy = false;
    o.sampling.temperature = t;
    o.sampling.top_k = 0;
    o.sampling.seed = 11;
    o.max_new_tokens = 64;
    const auto s = session.generate(prompt, o);
    REQUIRE(s.tokens.size() == 64);
    for (int id : s.tokens) CHECK(engine().tokenizer().id_to_token(id).has_value());
  }
}

TEST_CASE("a hook that leaves no usable logit still generates: every step gives the lowest token id") {
  kylin::Session session(engine());
  auto o = greedy(4);
  o.ignore_eos = true;
  for (const float poison : {std::nanf(""), -std::numeric_limits<float>::infinity()}) {
    for (const bool sample : {false, true}) {
      o.sampling.greedy = !sample;
      o.sampling.temperature = 0.7f;
      o.sampling.seed = 3;
      o.on_logits = [&](std::span<float> logits) { std::fill(logits.begin(), logits.end(), poison); };
      const auto g = session.complete("abc", o);
      CHECK(g.tokens == std::vector<int>{0, 0, 0, 0});
      CHECK(g.content == "!!!!");  // id 0 of the Qwen3 vocabulary
    }
  }
}

TEST_CASE("a subnormal temperature (1e-45, as a request may send) generates exactly the greedy tokens") {
  kylin::Session session(engine());
  const auto want = session.complete("The weather", greedy(16));
  for (const float t : {1e-45f, 1e-40f, 2.9e-39f}) {
    kylin::GenerateOptions o;
    o.max_new_tokens = 16;
    o.sampling.temperature = t;  // a temperature override lifts greedy: only 1/T = inf makes this argmax
    o.sampling.top_p = 0.95f;
    o.sampling.min_p = 0.05f;
    INFO("temperature " << t);
    const auto g = session.complete("The weather", o);
    CHECK(g.tokens == want.tokens);
    CHECK(g.content == want.content);
  }
}

}  // namespace session_test
