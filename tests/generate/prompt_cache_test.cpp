// Prompt caches on disk (issue 20): the KV file format and its checks, Session::save/load, and
// PromptCache's restart round trip, damaged files, eviction order, size limit and concurrent writers.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/temp_dir.hpp"
#include "kylin/generate/session.hpp"

using kylin::test::TempDir;

namespace prompt_cache_test {

namespace fs = std::filesystem;

const std::string chat_model = std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen3-chat";

kylin::Engine& engine() {
  static auto e = kylin::Engine::load(chat_model, {.threads = 2, .max_pass_rows = 512, .context_length = 1024});
  return *e;
}

kylin::GenerateOptions greedy(std::int64_t n, kylin::PromptCache* cache = nullptr) {
  kylin::GenerateOptions o;
  o.sampling.greedy = true;
  o.max_new_tokens = n;
  o.prompt_cache = cache;
  return o;
}

std::vector<int> prompt_of(const std::string& text) { return engine().tokenizer().encode(text); }

const std::string long_text =
    "You are a careful assistant. Answer briefly, cite nothing, and keep the tone friendly. The user asks about the sky.";

struct Warnings {
  std::vector<std::string> lines;
  kylin::PromptCacheOptions options(const fs::path& dir, std::uint64_t max_bytes = std::uint64_t{1} << 30) {
    return {.dir = dir, .max_bytes = max_bytes, .min_tokens = 4, .warn = [this](const std::string& m) { lines.push_back(m); }};
  }
};

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}


TEST_CASE("XXH64: the reference value of the empty input, and streaming in any pieces equals one call") {
  CHECK(kylin::xxh64({}) == 0xEF46DB3751D8E999ULL);
  std::vector<std::byte> data(1000);
  std::mt19937 rng(7);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  const std::uint64_t whole = kylin::xxh64(data);
  for (std::size_t cut : {1u, 7u, 31u, 32u, 33u, 500u, 999u}) {
    kylin::Xxh64 h;
    h.update(std::span(data).first(cut));
    h.update(std::span(data).subspan(cut));
    CHECK(h.digest() == whole);
  }
  CHECK(kylin::xxh64(std::span(data).first(999)) != whole);
}

TEST_CASE("cache sizes: binary and decimal suffixes, and text that is not a size is refused") {
  CHECK(kylin::parse_byte_size("8GiB") == std::uint64_t{8} << 30);
  CHECK(kylin::parse_byte_size("512MiB") == std::uint64_t{512} << 20);
  CHECK(kylin::parse_byte_size("1.5G") == std::uint64_t{3} << 29);
  CHECK(kylin::parse_byte_size("4096") == 4096);
  CHECK(kylin::parse_byte_size("10KB") == 10000);
  CHECK(kylin::parse_byte_size("2tib") == std::uint64_t{2} << 40);
  for (const char* bad : {"", "GiB", "-1", "8XB", "1..5G", "8 GiB", "1e30"}) CHECK_THROWS_AS(kylin::parse_byte_size(bad), kylin::Error);
}

TEST_CASE("Session::save then Session::load in another session gives the same state and the same greedy answer") {
  TempDir dir;
  kylin::Session a(engine());
  const auto prompt = prompt_of(long_text);
  const auto first = a.generate(prompt, greedy(8));
  const fs::path file = dir / "state.kvc";
  const std::size_t bytes = a.save(file);
  CHECK(bytes == fs::file_size(file));
  CHECK(dir.files().size() == 1);  // no temporary file left

  kylin::Session b(engine());
  CHECK(b.load(file) == a.cache().size());
  CHECK(std::vector<int>(b.cache().tokens().begin(), b.cache().tokens().end()) ==
        std::vector<int>(a.cache().tokens().begin(), a.cache().tokens().end()));
  const auto again = b.generate(prompt, greedy(8));
  CHECK(again.stats.cached_tokens == static_cast<std::int64_t>(prompt.size()) - 1);
  CHECK(again.tokens == first.tokens);
}

TEST_CASE("an empty session saves and loads as zero tokens (what saving an erased slot does)") {
  TempDir dir;
  kylin::Session empty(engine());
  empty.save(dir / "empty.kvc");
  kylin::Session b(engine());
  b.generate(prompt_of("hello there"), greedy(2));
  CHECK(b.load(dir / "empty.kvc") == 0);
  CHECK(b.cache().size() == 0);
}

TEST_CASE("Session::load refuses every kind of bad file with an io error naming the problem, leaving the cache usable") {
  TempDir dir;
  kylin::Session a(engine());
  a.generate(prompt_of(long_text), greedy(4));
  const fs::path good = dir / "good.kvc";
  a.save(good);
  const std::string bytes = read_bytes(good);
  const kylin::KVFileMeta meta = kylin::kv_file_meta(engine());

  auto refused = [&](const fs::path& p, const std::string& why) {
    kylin::Session b(engine());
    try {
      b.load(p);
      FAIL("loaded " << p);
    } catch (const kylin::Error& e) {
      CHECK(e.category() == kylin::ErrorCategory::io);
      CHECK_MESSAGE(std::string(e.what()).find(why) != std::string::npos, e.what());
    }
    CHECK(b.generate(prompt_of("hello there"), greedy(2)).stats.cached_tokens == 0);
  };
  refused(dir / "missing.kvc", "no such file");
  write_bytes(dir / "empty.kvc", "");
  refused(dir / "empty.kvc", "not a kylin KV file");
  write_bytes(dir / "garbage.kvc", std::string(4096, 'x'));
  refused(dir / "garbage.kvc", "not a kylin KV file");
  write_bytes(dir / "truncated.kvc", bytes.substr(0, bytes.size() - 100));
  refused(dir / "truncated.kvc", "truncated or damaged");
  std::string flipped = bytes;
  flipped[bytes.size() / 2] = static_cast<char>(flipped[bytes.size() / 2] ^ 0x10);
  write_bytes(dir / "flipped.kvc", flipped);
  refused(dir / "flipped.kvc", "checksum mismatch");
  std::string version = bytes;
  version[8] = 99;
  write_bytes(dir / "version.kvc", version);
  refused(dir / "version.kvc", "format version 99");
  kylin::KVFileMeta foreign = meta;
  foreign.identity ^= 1;
  kylin::write_kv_file(dir / "foreign.kvc", foreign, a.cache(), a.cache().size());
  refused(dir / "foreign.kvc", "another model");
  kylin::KVFileMeta f16 = meta;
  f16.dtype = kylin::DType::f16;
  kylin::write_kv_file(dir / "f16.kvc", f16, a.cache(), a.cache().size() / 2);
  refused(dir / "f16.kvc", "KV dtype");
  kylin::Session tiny(engine(), 8);
  CHECK_THROWS_WITH_AS(tiny.load(good), doctest::Contains("the context is 8"), kylin::Error);
}

TEST_CASE("restart round trip: a new PromptCache over the same directory loads the prefix, same greedy answer") {
  TempDir dir;
  Warnings w;
  const auto prompt = prompt_of(long_text);
  std::vector<int> first_tokens;
  {
    kylin::PromptCache cache(engine(), w.options(dir.path()));
    kylin::Session s(engine());
    const auto first = s.generate(prompt, greedy(8, &cache));
    CHECK(first.stats.cached_tokens == 0);
    first_tokens = first.tokens;
  }  // the destructor finishes the write
  REQUIRE(dir.files().size() == 1);
  kylin::PromptCache cache(engine(), w.options(dir.path()));
  kylin::Session s(engine());
  const auto again = s.generate(prompt, greedy(8, &cache));
  CHECK(again.stats.cached_tokens == static_cast<std::int64_t>(prompt.size()) - 1);
  CHECK(again.stats.cache_load_ms > 0);
  CHECK(again.tokens == first_tokens);
  // A prompt that only starts with the stored one loads it too.
  kylin::Session t(engine());
  const auto longer = prompt_of(long_text + " Why is it blue?");
  CHECK(t.generate(longer, greedy(4, &cache)).stats.cached_tokens >= static_cast<std::int64_t>(prompt.size()) - 2);
  CHECK(w.lines.empty());
}

TEST_CASE("damaged, foreign and stale entries are ignored with a warning, deleted, and change no answer") {
  const auto prompt = prompt_of(long_text);
  kylin::Session ref(engine());
  const auto expected = ref.generate(prompt, greedy(8)).tokens;
  const kylin::KVFileMeta meta = kylin::kv_file_meta(engine());

  using Damage = std::function<void(const fs::path&, std::string&)>;
  const std::vector<std::pair<std::string, Damage>> kinds = {
      {"truncated", [](const fs::path&, std::string& b) { b.resize(b.size() - 9); }},
      {"flipped byte", [](const fs::path&, std::string& b) { b[b.size() - 20] = static_cast<char>(b[b.size() - 20] ^ 1); }},
      {"flipped token", [](const fs::path&, std::string& b) { b[64] = static_cast<char>(b[64] ^ 1); }},
      {"wrong version", [](const fs::path&, std::string& b) { b[8] = 2; }},
      {"zero-length", [](const fs::path&, std::string& b) { b.clear(); }},
      {"garbage", [](const fs::path&, std::string& b) { b.assign(b.size(), '\x5a'); }},
      {"foreign model", [&](const fs::path& p, std::string& b) {
         kylin::KVFileMeta m = meta;
         m.identity += 1;
         kylin::write_kv_file(p, m, ref.cache(), static_cast<std::int64_t>(prompt.size()));
         b = read_bytes(p);
       }},
      {"wrong kv dtype", [&](const fs::path& p, std::string& b) {
         kylin::KVFileMeta m = meta;
         m.dtype = kylin::DType::f16;
         kylin::write_kv_file(p, m, ref.cache(), static_cast<std::int64_t>(prompt.size()));
         b = read_bytes(p);
       }},
  };
  for (const auto& kind : kinds) {
    const std::string& name = kind.first;  // not a structured binding: clang 14 cannot capture those in CAPTURE
    const Damage& damage = kind.second;
    CAPTURE(name);
    TempDir dir;
    Warnings w;
    kylin::PromptCache cache(engine(), w.options(dir.path()));
    {
      kylin::Session s(engine());
      s.generate(prompt, greedy(1, &cache));
      cache.flush();
    }
    REQUIRE(dir.files().size() == 1);
    const fs::path entry = dir.files().front();
    CHECK(entry == cache.entry_path(prompt));
    std::string bytes = read_bytes(entry);
    damage(entry, bytes);
    write_bytes(entry, bytes);
    kylin::Session s(engine());
    auto o = greedy(8, &cache);
    o.store_prompt = false;
    const auto g = s.generate(prompt, o);
    CHECK(g.tokens == expected);
    CHECK(g.stats.cached_tokens == 0);
    CHECK(w.lines.size() == 1);
    CHECK_FALSE(fs::exists(entry));
    CHECK(cache.counters().damaged == 1);
  }
}

TEST_CASE("entries of other models sharing the directory are left alone") {
  TempDir dir;
  Warnings w;
  kylin::PromptCache cache(engine(), w.options(dir.path()));
  kylin::KVFileMeta other = cache.meta();
  other.identity ^= 0xff;
  kylin::PromptCache other_cache(other, w.options(dir.path()));
  kylin::Session s(engine());
  const auto prompt = prompt_of(long_text);
  s.generate(prompt, greedy(1));
  CHECK(other_cache.store(s.cache(), static_cast<std::int64_t>(prompt.size())));
  other_cache.flush();
  kylin::Session t(engine());
  CHECK(t.generate(prompt, greedy(1, &cache)).stats.cached_tokens == 0);
  CHECK(fs::exists(other_cache.entry_path(prompt)));
  CHECK(w.lines.empty());
}

TEST_CASE("above the size limit the least recently used entries go first; loading an entry counts as a use") {
  TempDir dir;
  Warnings w;
  // Four prompts of one length (so entries of one size), sharing no prefix.
  std::vector<std::vector<int>> prompts(4, prompt_of(long_text));
  for (int i = 1; i < 4; ++i) prompts[static_cast<std::size_t>(i)][0] += i;
  const std::size_t n = prompts[0].size();
  const std::uint64_t largest = 64 + 4 * n + 8 + kylin::kv_payload_bytes(kylin::kv_file_meta(engine()), n);
  kylin::PromptCache cache(engine(), w.options(dir.path(), 2 * largest + largest / 2));  // room for two entries
  auto store = [&](std::size_t i) {
    kylin::Session s(engine());
    s.generate(prompts[i], greedy(1));
    REQUIRE(cache.store(s.cache(), static_cast<std::int64_t>(prompts[i].size())));
    cache.flush();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // distinct mtimes on any file system
  };
  store(0);
  store(1);
  kylin::Session user(engine());
  CHECK(user.generate(prompts[0], greedy(1, &cache)).stats.cached_tokens > 0);  // 0 is now the most recently used
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  store(2);
  CHECK(fs::exists(cache.entry_path(prompts[0])));
  CHECK_FALSE(fs::exists(cache.entry_path(prompts[1])));
  CHECK(fs::exists(cache.entry_path(prompts[2])));
  store(3);
  CHECK_FALSE(fs::exists(cache.entry_path(prompts[0])));
  CHECK(dir.files().size() == 2);

  // An entry larger than the whole limit is never written.
  kylin::PromptCache small(engine(), w.options(dir.path(), 1000));
  kylin::Session s(engine());
  s.generate(prompts[1], greedy(1));
  CHECK_FALSE(small.store(s.cache(), static_cast<std::int64_t>(prompts[1].size())));
  CHECK(w.lines.empty());
}

TEST_CASE("concurrent writers of the same and different entries never leave a file a reader finds damaged") {
  TempDir dir;
  Warnings w1, w2;
  const auto p1 = prompt_of(long_text), p2 = prompt_of("Another long enough prompt for the second writer to store.");
  kylin::Session s1(engine()), s2(engine());
  s1.generate(p1, greedy(1));
  s2.generate(p2, greedy(1));
  const kylin::KVFileMeta meta = kylin::kv_file_meta(engine());
  const fs::path shared = dir / "shared.kvc";
  std::atomic<bool> done{false};
  std::atomic<int> bad{0}, loads{0};
  std::string first_bad;  // written by the reader before it ends, read after join
  auto writer = [&](const kylin::KVCache& c, std::int64_t n, const fs::path& own) {
    for (int i = 0; i < 15; ++i) {
      kylin::write_kv_file(shared, meta, c, n);  // both write the same name
      kylin::write_kv_file(own, meta, c, n);
    }
  };
  std::thread reader([&] {
    kylin::KVCache into = engine().model().new_cache(1024);
    while (!done) {
      try {
        kylin::KVFileReader r(shared, meta);
        r.load_into(into);
        ++loads;
      } catch (const kylin::Error& e) {
        // Absent before the first rename is fine; anything else is a reader seeing a partial file.
        if (std::string(e.what()).find("no such file") == std::string::npos) {
          if (bad++ == 0) first_bad = e.what();
        }
      }
    }
  });
  std::thread a(writer, std::cref(s1.cache()), static_cast<std::int64_t>(p1.size()), dir / "a.kvc");
  std::thread b(writer, std::cref(s2.cache()), static_cast<std::int64_t>(p2.size()), dir / "b.kvc");
  a.join();
  b.join();
  done = true;
  reader.join();
  CHECK_MESSAGE(bad == 0, first_bad);
  CHECK(loads > 0);
  for (const auto& f : dir.files()) {
    CAPTURE(f);
    CHECK(f.filename().string().find(".tmp.") == std::string::npos);
    kylin::KVCache into = engine().model().new_cache(1024);
    kylin::KVFileReader r(f, meta);
    CHECK_NOTHROW(r.load_into(into));
  }

  // Two PromptCaches (as two processes would) storing the same and different prefixes at once.
  TempDir shared_dir;
  kylin::PromptCache c1(engine(), w1.options(shared_dir.path())), c2(engine(), w2.options(shared_dir.path()));
  std::thread t1([&] { c1.store(s1.cache(), static_cast<std::int64_t>(p1.size())); c1.store(s2.cache(), static_cast<std::int64_t>(p2.size())); });
  std::thread t2([&] { c2.store(s1.cache(), static_cast<std::int64_t>(p1.size())); c2.store(s2.cache(), static_cast<std::int64_t>(p2.size())); });
  t1.join();
  t2.join();
  c1.flush();
  c2.flush();
  kylin::Session fresh(engine());
  CHECK(fresh.generate(p1, greedy(1, &c1)).stats.cached_tokens > 0);
  CHECK(w1.lines.empty());
  CHECK(w2.lines.empty());
}

// Runs `load` on another thread; if it has not returned within a minute (it blocks in open() on a
// FIFO), a writer is opened on `fifo` to release it and the check fails. No timing is asserted: the
// minute only bounds how long a broken build hangs.
template <class F>
void returns_without_a_writer(const fs::path& fifo, F load) {
  auto done = std::async(std::launch::async, load);
  if (done.wait_for(std::chrono::minutes(1)) != std::future_status::ready) {
    FAIL_CHECK("blocked opening the FIFO " << fifo);
    const int w = ::open(fifo.c_str(), O_WRONLY);  // the reader's open() returns; it then reads end of file
    done.wait();
    if (w >= 0) ::close(w);
  }
  done.get();
}

TEST_CASE("a FIFO or a symlink is never read as a KV file: Session::load and the cache refuse them without blocking (issue 39)") {
  TempDir dir;
  kylin::Session a(engine());
  const auto prompt = prompt_of(long_text);
  a.generate(prompt, greedy(2));
  const fs::path good = dir / "good.kvc";
  a.save(good);
  REQUIRE(::mkfifo((dir / "fifo.kvc").c_str(), 0600) == 0);
  returns_without_a_writer(dir / "fifo.kvc", [&] {
    kylin::Session b(engine());
    CHECK_THROWS_WITH_AS(b.load(dir / "fifo.kvc"), doctest::Contains("not a regular file"), kylin::Error);
  });
  fs::create_symlink(good, dir / "link.kvc");  // a symlink to a good file, as one to a file outside the directory
  kylin::Session b(engine());
  CHECK_THROWS_WITH_AS(b.load(dir / "link.kvc"), doctest::Contains("symbolic link"), kylin::Error);
  CHECK(b.load(good) == a.cache().size());

  // A FIFO and a symlink named like this model's entries: skipped with a warning, the prompt prefilled.
  TempDir cache_dir;
  Warnings w;
  kylin::PromptCache cache(engine(), w.options(cache_dir.path()));
  const fs::path fifo = cache.entry_path(std::vector<int>{1, 2, 3});
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  fs::create_symlink(good, cache.entry_path(std::vector<int>{4, 5, 6}));
  returns_without_a_writer(fifo, [&] {
    kylin::Session s(engine());
    auto o = greedy(1, &cache);
    o.store_prompt = false;
    CHECK(s.generate(prompt, o).stats.cached_tokens == 0);
  });
  CHECK(w.lines.size() == 2);
}

// A copy of the KV file `bytes` with the float at payload index `at` replaced and the checksum
// recomputed, as a forger who knows the format would write it.
std::string forged(std::string bytes, std::size_t at, float value) {
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data() + 40, 8);
  std::memcpy(bytes.data() + 64 + 4 * n + 4 * at, &value, 4);
  const std::uint64_t sum = kylin::xxh64(std::as_bytes(std::span(bytes.data(), bytes.size() - 8)));
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
  return bytes;
}

TEST_CASE("a file with a valid checksum but a NaN or infinite key or value is refused; the cache stays empty (issue 39)") {
  TempDir dir;
  kylin::Session a(engine());
  a.generate(prompt_of(long_text), greedy(2));
  a.save(dir / "good.kvc");
  const std::string bytes = read_bytes(dir / "good.kvc");
  const std::size_t floats = (bytes.size() - 72 - 4 * static_cast<std::size_t>(a.cache().size())) / 4;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const auto& [at, value] : std::vector<std::pair<std::size_t, float>>{{0, nan}, {floats / 2, inf}, {floats - 1, -inf}}) {
    const std::size_t where = at;  // CAPTURE cannot take a structured binding in clang 14
    CAPTURE(where);
    write_bytes(dir / "forged.kvc", forged(bytes, at, value));
    kylin::Session b(engine());
    CHECK_THROWS_WITH_AS(b.load(dir / "forged.kvc"), doctest::Contains("non-finite"), kylin::Error);
    CHECK(b.cache().size() == 0);
  }
  write_bytes(dir / "finite.kvc", forged(bytes, 0, 1.5f));  // a finite forgery is indistinguishable: loaded
  kylin::Session c(engine());
  CHECK(c.load(dir / "finite.kvc") == a.cache().size());
}

TEST_CASE("the model key covers the weight format and layout: a q4 or q8 engine never loads a stored-weights entry, nor the reverse (issue 38)") {
  const std::string dir_of_model = chat_model;
  auto with = [&](kylin::WeightFormat w, kylin::WeightLayout l) {
    return kylin::Engine::load(dir_of_model, {.threads = 2, .max_pass_rows = 512, .context_length = 1024, .weights = w, .weight_layout = l});
  };
  auto q4 = with(kylin::WeightFormat::q4, kylin::WeightLayout::packed);
  auto q8 = with(kylin::WeightFormat::q8, kylin::WeightLayout::packed);
  auto stored_layout = with(kylin::WeightFormat::stored, kylin::WeightLayout::stored);
  const kylin::KVFileMeta base = kylin::kv_file_meta(engine());
  CHECK(kylin::kv_file_meta(*q4).identity != base.identity);
  CHECK(kylin::kv_file_meta(*q8).identity != base.identity);
  CHECK(kylin::kv_file_meta(*q4).identity != kylin::kv_file_meta(*q8).identity);
  CHECK(kylin::kv_file_meta(*stored_layout).identity != base.identity);
  CHECK(kylin::kv_file_meta(*with(kylin::WeightFormat::q4, kylin::WeightLayout::packed)).identity == kylin::kv_file_meta(*q4).identity);

  TempDir dir;
  Warnings w;
  const auto prompt = prompt_of(long_text);
  {
    kylin::PromptCache cache(engine(), w.options(dir.path()));
    kylin::Session s(engine());
    s.generate(prompt, greedy(1, &cache));
    cache.flush();
    kylin::Session saved(engine());
    saved.generate(prompt, greedy(1));
    saved.save(dir / "slot.bin");
  }
  REQUIRE(dir.files(".kvc").size() == 1);
  {
    kylin::PromptCache cache(*q4, w.options(dir.path()));
    kylin::Session s(*q4);
    auto o = greedy(1, &cache);
    CHECK(s.generate(prompt, o).stats.cached_tokens == 0);  // the stored-weights entry is not its own
    cache.flush();
    CHECK_THROWS_WITH_AS(s.load(dir / "slot.bin"), doctest::Contains("another model"), kylin::Error);
  }
  CHECK(dir.files(".kvc").size() == 2);  // each kept its own entry
  kylin::PromptCache cache(engine(), w.options(dir.path()));
  kylin::Session s(engine());
  auto o = greedy(1, &cache);
  o.store_prompt = false;
  CHECK(s.generate(prompt, o).stats.cached_tokens > 0);  // its own entry, not the q4 one
  CHECK(w.lines.empty());
}

}  // namespace prompt_cache_test
