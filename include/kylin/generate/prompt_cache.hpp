// PromptCache: a directory of KV-cache prefixes that outlives slots, processes and restarts (issue
// 20, docs/PROMPT_CACHE.md). A prompt's keys and values are copied out after its request and
// written by a background thread; a later prompt that starts with a stored prefix loads it instead
// of prefilling it. Entries past the size limit are evicted least recently used first.
#pragma once

#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "kylin/generate/kv_file.hpp"

namespace kylin {

// "8GiB", "512MiB", "1.5G", "4096" -> bytes. K, M, G, T and KiB..TiB are powers of 1024; KB..TB of 1000.
inline std::uint64_t parse_byte_size(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) ++i;
  const std::string number(text.substr(0, i));
  std::string unit(text.substr(i));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = unit.empty() || unit == "b" ? 1 : -1;
  if (!unit.empty() && scale < 0) {
    const auto power = std::string_view("kmgt").find(unit[0]);
    const std::string_view rest = std::string_view(unit).substr(1);
    if (power != std::string_view::npos && (rest.empty() || rest == "ib")) scale = std::pow(1024.0, power + 1);
    if (power != std::string_view::npos && rest == "b") scale = std::pow(1000.0, power + 1);
  }
  char* end = nullptr;
  const double value = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (scale < 0 || value < 0 || end != number.c_str() + number.size() || value * scale >= 0x1p63)
    throw Error(ErrorCategory::config, "size", "'" + std::string(text) + "' is not a size like 8GiB, 512MiB, 1.5G or 4096");
  return static_cast<std::uint64_t>(value * scale);
}

struct PromptCacheOptions {
  std::filesystem::path dir;
  std::uint64_t max_bytes = std::uint64_t{8} << 30;  // all entries of the directory, every model's
  std::int64_t min_tokens = 16;                      // shorter prefixes are neither stored nor loaded
  std::function<void(const std::string&)> warn;      // damaged files, failed writes; default: stderr
};

class PromptCache {
 public:
  PromptCache(const Engine& engine, PromptCacheOptions options) : PromptCache(kv_file_meta(engine), std::move(options)) {}
  PromptCache(const KVFileMeta& meta, PromptCacheOptions options) : meta_(meta), o_(std::move(options)) {
    if (!o_.warn) o_.warn = [](const std::string& m) { std::fprintf(stderr, "kylin: prompt cache: %s\n", m.c_str()); };
    std::error_code ec;
    std::filesystem::create_directories(o_.dir, ec);
    if (!std::filesystem::is_directory(o_.dir))
      throw Error(ErrorCategory::io, o_.dir.string(), "cannot create the prompt cache directory" + (ec ? ": " + ec.message() : ""));
    char key[17];
    Xxh64 model_key;
    model_key.add(meta.identity).add(meta.dtype).add(meta.n_layers).add(meta.n_kv_heads).add(meta.head_dim);
    if (meta.state_floats > 0) model_key.add(meta.state_floats);  // (attention-only models keep their keys)
    std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(model_key.digest()));
    key_ = key;
    writer_ = std::thread([this] { write_loop(); });
  }
  PromptCache(const PromptCache&) = delete;
  PromptCache& operator=(const PromptCache&) = delete;
  // Finishes the queued write, then stops the writer.
  ~PromptCache() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    writer_.join();
  }

  const std::filesystem::path& dir() const { return o_.dir; }
  const KVFileMeta& meta() const { return meta_; }
  std::uint64_t max_bytes() const { return o_.max_bytes; }

  // The entry file of a prefix: <model key>-<XXH64 of the token ids>.kvc, the model key hashing the
  // identity, KV dtype and geometry, so several models and dtypes can share a directory.
  std::filesystem::path entry_path(std::span<const int> tokens) const {
    char name[40];
    std::snprintf(name, sizeof name, "%s-%016llx.kvc", key_.c_str(), static_cast<unsigned long long>(tokens_hash(tokens)));
    return o_.dir / name;
  }
  // Whether `name` is a cache entry of any model (what eviction may delete).
  static bool is_entry_name(std::string_view name) {
    if (name.size() != 37 || !name.ends_with(".kvc") || name[16] != '-') return false;
    for (std::size_t i = 0; i < 33; ++i)
      if (i != 16 && !((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return false;
    return true;
  }

  // Loads into `cache` the entry sharing the longest prefix with `prompt` (at most all but its last
  // token; for a cache with recurrent states, whole entries only), if that is more than the `have`
  // tokens the cache already shares with it and at least min_tokens. Returns the prompt tokens it covers, or 0: then the cache is unchanged, or empty
  // when the chosen file turned out damaged (it is deleted, with a warning).
  std::int64_t load(std::span<const int> prompt, KVCache& cache, std::int64_t have) {
    const auto limit = static_cast<std::int64_t>(prompt.size()) - 1;
    std::optional<KVFileReader> best;
    std::int64_t best_n = 0;
    for (const auto& path : entries(key_ + "-")) {
      if (!is_entry_name(path.filename().string())) continue;  // a writer's temporary file
      try {
        KVFileReader r(path, meta_);
        if (static_cast<std::int64_t>(r.tokens().size()) > cache.capacity()) continue;
        const auto [a, b] = std::mismatch(r.tokens().begin(), r.tokens().end(), prompt.begin(), prompt.end());
        std::int64_t n = std::min<std::int64_t>(a - r.tokens().begin(), limit);
        // a recurrent state serves only the whole entry: an entry the prompt leaves early is of no use
        if (cache.has_states() && n < static_cast<std::int64_t>(r.tokens().size())) n = 0;
        if (n > best_n) best.emplace(std::move(r)), best_n = n;
      } catch (const Error& e) {
        drop_unreadable(path, e);
      }
    }
    if (!best || best_n <= have || best_n < o_.min_tokens) return 0;
    try {
      best->load_into(cache);
    } catch (const Error& e) {
      o_.warn(std::string(e.what()) + "; deleted, prefilling instead");
      best->remove_if_unchanged();
      ++damaged_;
      return 0;
    }
    touch(best->path());
    ++hits_;
    return best_n;
  }

  // Queues tokens [0, n) of `cache` for writing (of a cache with recurrent states, the first
  // cache.restorable(n), with the state there): the rows are copied now, the file is written by the
  // background thread. False when nothing was queued: fewer than min_tokens, already stored (its use
  // time is refreshed), larger than the whole cache, or the writer still busy.
  bool store(const KVCache& cache, std::int64_t n) {
    if (n > cache.size()) return false;
    n = cache.restorable(std::min(n, cache.text_prefix()));  // a KV file keeps no image tokens (their positions)
    if (n < o_.min_tokens) return false;
    const auto tokens = cache.tokens().first(static_cast<std::size_t>(n));
    const auto path = entry_path(tokens);
    const std::size_t payload = kv_payload_bytes(meta_, static_cast<std::uint64_t>(n));
    if (payload + sizeof(KVFileHeader) + tokens.size_bytes() + 8 > o_.max_bytes) return false;
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) return touch(path), false;
    {
      std::lock_guard lock(mutex_);
      if (!queue_.empty()) return ++dropped_, false;
    }
    Pending p{path, {tokens.begin(), tokens.end()}, std::vector<std::byte>(payload), std::vector<std::byte>(cache.state_bytes())};
    if (!p.state.empty()) cache.read_state(n, p.state);
    std::byte* out = p.payload.data();
    for (std::int64_t l = 0; l < meta_.n_layers; ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (std::int64_t h = 0; h < meta_.n_kv_heads; ++h) {
          cache.read_rows(l, kv, h, n, {out, cache.head_bytes(n)});
          out += cache.head_bytes(n);
        }
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(p));
    }
    wake_.notify_all();
    return true;
  }

  // Waits until every queued entry is on disk (or failed with a warning).
  void flush() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return queue_.empty() && !writing_; });
  }

  // Deletes entries, least recently used (oldest mtime) first, until they total at most
  // max_bytes; also temporary files a crashed writer left (older than an hour). Files that
  // vanish meanwhile (another process evicting) are skipped.
  void evict() {
    namespace fs = std::filesystem;
    struct Entry {
      fs::path path;
      std::uint64_t bytes;
      fs::file_time_type used;
    };
    std::vector<Entry> all;
    std::uint64_t total = 0;
    const auto now = fs::file_time_type::clock::now();
    for (const auto& path : entries("")) {
      std::error_code ec;
      const auto bytes = fs::file_size(path, ec);
      const auto used = fs::last_write_time(path, ec);
      if (ec) continue;
      if (path.filename().string().find(".kvc.tmp.") != std::string::npos) {
        if (now - used > std::chrono::hours(1)) fs::remove(path, ec);
        continue;
      }
      if (!is_entry_name(path.filename().string())) continue;
      all.push_back({path, bytes, used});
      total += bytes;
    }
    std::sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
    for (const auto& e : all) {
      if (total <= o_.max_bytes) break;
      std::error_code ec;
      fs::remove(e.path, ec);
      total -= e.bytes;
    }
  }

  struct Counters {
    std::uint64_t hits = 0, stores = 0, dropped = 0, damaged = 0;
  };
  Counters counters() const { return {hits_.load(), stores_.load(), dropped_.load(), damaged_.load()}; }

 private:
  struct Pending {
    std::filesystem::path path;
    std::vector<int> tokens;
    std::vector<std::byte> payload;  // [layers][k|v][kv heads][n][head_dim] in meta_.dtype
    std::vector<std::byte> state;    // [state_floats] f32: the recurrent state after the tokens (hybrid models)
  };

  // Regular files of the directory whose name starts with `prefix`.
  std::vector<std::filesystem::path> entries(const std::string& prefix) const {
    std::vector<std::filesystem::path> out;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(o_.dir, ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec))
      if (it->path().filename().string().starts_with(prefix)) out.push_back(it->path());
    return out;
  }

  // A file gone since the listing was evicted by someone else; anything else unreadable is damage
  // (a FIFO or symlink under an entry's name too: the reader never opens those).
  void drop_unreadable(const std::filesystem::path& path, const Error& e) {
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return;
    o_.warn(std::string(e.what()) + "; deleted");
    std::filesystem::remove(path, ec);
    ++damaged_;
  }

  static void touch(const std::filesystem::path& path) {
    std::error_code ec;
    std::filesystem::last_write_time(path, std::filesystem::file_time_type::clock::now(), ec);
  }

  void write_loop() {
    while (true) {
      Pending p;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        p = std::move(queue_.front());
        queue_.pop_front();
        writing_ = true;
      }
      write(p);
      {
        std::lock_guard lock(mutex_);
        writing_ = false;
      }
      idle_.notify_all();
    }
  }

  void write(const Pending& p) {
    const auto n = static_cast<std::int64_t>(p.tokens.size());
    const std::size_t block = static_cast<std::size_t>(n * meta_.head_dim) * dtype_size(meta_.dtype);
    try {
      const KVFileState state{n, p.state};
      write_kv_file(
          p.path, meta_, p.tokens,
          [&](std::int64_t l, int kv, std::int64_t h) {
            const auto index = static_cast<std::size_t>((l * 2 + kv) * meta_.n_kv_heads + h);
            return std::span<const std::byte>(p.payload).subspan(index * block, block);
          },
          p.state.empty() ? std::span<const KVFileState>{} : std::span(&state, 1));
      ++stores_;
      evict();
    } catch (const std::exception& e) {
      o_.warn(std::string(e.what()) + " (not stored)");
    }
  }

  KVFileMeta meta_;
  PromptCacheOptions o_;
  std::string key_;
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<Pending> queue_;
  bool writing_ = false, stopping_ = false;
  std::atomic<std::uint64_t> hits_{0}, stores_{0}, dropped_{0}, damaged_{0};
  std::thread writer_;
};

}  // namespace kylin
