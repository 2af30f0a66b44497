// KV-cache files (format in docs/PROMPT_CACHE.md): a prefix of a KVCache on disk, behind a header
// that names exactly what it belongs to (model identity, KV dtype, geometry, token ids) and ending
// in an XXH64 checksum. Written to a unique temporary file and renamed into place; read back only
// through KVFileReader, which checks everything before the state is used.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kylin/generate/engine.hpp"
#include "kylin/kernels/quant.hpp"
#include "kylin/kernels/simd.hpp"

namespace kylin {

static_assert(std::endian::native == std::endian::little, "KV files are little-endian; the reader copies fields as is");

// XXH64 (Yann Collet's xxHash, 64-bit, seed 0), streaming. Fast enough (several GB/s) that
// checking a 460 MB prefix costs less than reading it from the page cache.
class Xxh64 {
 public:
  Xxh64& update(std::span<const std::byte> in) {
    if (in.empty()) return *this;  // its data() may be null, which memcpy must not get
    total_ += in.size();
    const std::byte* p = in.data();
    std::size_t n = in.size();
    if (buffered_ > 0) {
      const std::size_t take = std::min(n, buf_.size() - buffered_);
      std::memcpy(buf_.data() + buffered_, p, take);
      buffered_ += take, p += take, n -= take;
      if (buffered_ < buf_.size()) return *this;
      stripe(buf_.data());
      buffered_ = 0;
    }
    for (; n >= 32; p += 32, n -= 32) stripe(p);
    std::memcpy(buf_.data(), p, n);
    buffered_ = n;
    return *this;
  }
  std::uint64_t digest() const {
    std::uint64_t h = total_ >= 32 ? rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18) : p5;
    if (total_ >= 32)
      for (std::uint64_t v : v_) h = (h ^ round(0, v)) * p1 + p4;
    h += total_;
    const std::byte* p = buf_.data();
    std::size_t n = buffered_;
    for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ round(0, load<std::uint64_t>(p)), 27) * p1 + p4;
    if (n >= 4) h = rotl(h ^ (std::uint64_t{load<std::uint32_t>(p)} * p1), 23) * p2 + p3, p += 4, n -= 4;
    for (; n > 0; ++p, --n) h = rotl(h ^ (std::uint64_t{std::to_integer<std::uint8_t>(*p)} * p5), 11) * p1;
    h ^= h >> 33, h *= p2, h ^= h >> 29, h *= p3, h ^= h >> 32;
    return h;
  }
  template <class T>
  Xxh64& add(const T& value) {  // a trivially copyable value's bytes
    return update(std::as_bytes(std::span<const T>(&value, 1)));
  }

 private:
  static constexpr std::uint64_t p1 = 0x9E3779B185EBCA87ULL, p2 = 0xC2B2AE3D27D4EB4FULL, p3 = 0x165667B19E3779F9ULL,
                                 p4 = 0x85EBCA77C2B2AE63ULL, p5 = 0x27D4EB2F165667C5ULL;
  static std::uint64_t rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  static std::uint64_t round(std::uint64_t acc, std::uint64_t in) { return rotl(acc + in * p2, 31) * p1; }
  template <class T>
  static T load(const std::byte* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  void stripe(const std::byte* p) {
    for (int i = 0; i < 4; ++i) v_[i] = round(v_[i], load<std::uint64_t>(p + 8 * i));
  }

  std::array<std::uint64_t, 4> v_{p1 + p2, p2, 0, 0 - p1};
  std::array<std::byte, 32> buf_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_ = 0;
};

inline std::uint64_t xxh64(std::span<const std::byte> bytes) {
  Xxh64 h;
  h.update(bytes);
  return h.digest();
}

inline constexpr std::uint32_t kv_file_version = 1;
inline constexpr std::array<char, 8> kv_file_magic{'K', 'Y', 'L', 'N', 'K', 'V', 'C', '\0'};

// What a KV state belongs to. `identity` hashes config.json, the safetensors headers and file
// sizes (model_identity), and the engine's backend, the instruction set of its kernels, its weight
// format and layout (engine_identity); the rest must match the cache. n_layers counts the layers with
// keys and values; state_floats is the recurrent state of a hybrid model's linear layers (0 without).
struct KVFileMeta {
  std::uint64_t identity = 0;
  DType dtype = DType::f32;
  std::int64_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
  std::int64_t state_floats = 0;
  bool operator==(const KVFileMeta&) const = default;
};

// The fixed 64-byte header; token ids ([n_tokens] int32), the payload ([layers][k|v][kv heads]
// [n_tokens][head_dim] in dtype), for a hybrid model (state_floats > 0) the recurrent states (a u64 count,
// then per state a u64 position and [state_floats] f32: each linear layer's conv inputs and delta-rule
// matrices, RecurrentStates' layout; positions ascending, the last one n_tokens) and the checksum (XXH64
// of all bytes before it) follow. Files of attention-only models have state_floats 0 and no states
// section, as every file before it had.
struct KVFileHeader {
  std::array<char, 8> magic = kv_file_magic;
  std::uint32_t version = kv_file_version;
  std::uint32_t dtype = 0;  // DType's value
  std::uint64_t identity = 0;
  std::uint32_t n_layers = 0, n_kv_heads = 0, head_dim = 0, state_floats = 0;
  std::uint64_t n_tokens = 0;
  std::uint64_t tokens_hash = 0;  // XXH64 of the token ids: also the file name's second half
  std::uint64_t payload_bytes = 0;
};
static_assert(sizeof(KVFileHeader) == 64);

inline std::uint64_t tokens_hash(std::span<const int> tokens) { return xxh64(std::as_bytes(tokens)); }

inline std::size_t kv_payload_bytes(const KVFileMeta& m, std::uint64_t n_tokens) {
  return static_cast<std::size_t>(2 * m.n_layers * m.n_kv_heads * m.head_dim) * dtype_size(m.dtype) * n_tokens;
}

// Hash of what decides a model's KV values without reading its weights: config.json's bytes and,
// for each *.safetensors file (sorted by name), its name, size and header (every tensor's name,
// dtype, shape and offsets). Weights rewritten
// in place with the same table and sizes are not told apart (docs/PROMPT_CACHE.md).
inline std::uint64_t model_identity(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  Xxh64 h;
  const std::string config = io::read_text_file(dir / "config.json");
  h.add(config.size()).update(std::as_bytes(std::span(config)));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    const std::string name = f.filename().string();
    h.add(name.size()).update(std::as_bytes(std::span(name))).add(static_cast<std::uint64_t>(fs::file_size(f)));
    std::FILE* in = std::fopen(f.c_str(), "rb");
    std::uint64_t n = 0;
    if (in == nullptr || std::fread(&n, 8, 1, in) != 1 || n > (std::uint64_t{100} << 20)) {
      if (in) std::fclose(in);
      throw Error(ErrorCategory::io, f.string(), "cannot read the safetensors header");
    }
    std::vector<std::byte> header(static_cast<std::size_t>(n));
    const bool ok = std::fread(header.data(), 1, header.size(), in) == header.size();
    std::fclose(in);
    if (!ok) throw Error(ErrorCategory::io, f.string(), "cannot read the safetensors header");
    h.add(n).update(header);
  }
  return h.digest();
}

// The identity of a loaded engine: model_identity of its files, then what it computes the KV values
// with beyond them: the backend and its kernels' instruction set (the CPU's sum in different orders),
// the weight format (q8/q4 quantize at load, and the order their kernels sum in), the weight layout, mapped experts
// and BF16 prefill activations where asked for. A q4 server sharing a directory with a stored-weights one
// never loads the other's states.
inline std::uint64_t engine_identity(const Engine& engine) {
  Xxh64 h;
  h.add(model_identity(engine.dir()));
  const Model& m = engine.model();
  for (const std::string_view part : {m.backend_name(), m.kernel_set(), weight_format_name(m.weight_format()), weight_layout_name(m.weight_layout())})
    h.add(part.size()).update(std::as_bytes(std::span(part)));
  if (m.weight_format() != WeightFormat::stored) h.add(kernels::quant_order_version);
  if (m.expert_memory() == ExpertMemory::mapped) {  // the experts row-major beside packed weights
    const std::string_view name = expert_memory_name(ExpertMemory::mapped);
    h.add(name.size()).update(std::as_bytes(std::span(name)));
  }
  if (m.prefill_activations() != kernels::PrefillActivations::f32) {  // KV values from rounded activations
    const std::string_view name = kernels::prefill_activations_name(m.prefill_activations());
    h.add(name.size()).update(std::as_bytes(std::span(name)));
  }
  return h.digest();
}

inline KVFileMeta kv_file_meta(const Engine& engine) {
  const ModelConfig& c = engine.model().config();
  return {engine_identity(engine), engine.model().kv_dtype(), c.attention_layers(), c.num_key_value_heads, c.head_dim,
          static_cast<std::int64_t>(KVCache::state_bytes(c) / sizeof(float))};
}

// A KV file the disk refused: error_number() is the errno of the call that failed (ENOSPC: the
// disk is full; EDQUOT, EFBIG: a quota or file size limit).
class KVWriteError : public Error {
 public:
  KVWriteError(const std::filesystem::path& path, int error_number)
      : Error(ErrorCategory::io, path.string(), std::string("cannot write: ") + std::strerror(error_number)), errno_(error_number) {}
  int error_number() const noexcept { return errno_; }
  bool out_of_space() const noexcept { return errno_ == ENOSPC || errno_ == EDQUOT || errno_ == EFBIG; }

 private:
  int errno_;
};

// One recurrent state of a file: the state after `position` tokens, meta.state_floats floats' bytes.
struct KVFileState {
  std::int64_t position = 0;
  std::span<const std::byte> bytes;
};

// The most states a file holds (a cache's snapshots and its live state).
inline constexpr std::uint64_t max_kv_file_states = 64;

// Writes tokens [0, n) of `cache` to `path` through a temporary file beside it (`path` + ".tmp."
// + pid + random), created exclusively (never through an existing name or symlink) and renamed
// into place: readers see the old file, no file, or the whole new one; a symlink at `path` is
// replaced, not written through. `states`: a hybrid model's recurrent states (the last one after all the
// tokens), none for an attention-only model. Returns the bytes written; KVWriteError when the disk refuses.
inline std::size_t write_kv_file(const std::filesystem::path& path, const KVFileMeta& meta, std::span<const int> tokens,
                                 const std::function<std::span<const std::byte>(std::int64_t layer, int kv, std::int64_t head)>& rows,
                                 std::span<const KVFileState> states = {}) {
  const std::size_t state_bytes = static_cast<std::size_t>(meta.state_floats) * sizeof(float);
  bool states_ok = meta.state_floats <= 0xFFFFFFFFll && (meta.state_floats == 0) == states.empty() && states.size() <= max_kv_file_states;
  for (std::size_t i = 0; i < states.size(); ++i)
    states_ok = states_ok && states[i].bytes.size() == state_bytes && states[i].position > (i == 0 ? 0 : states[i - 1].position) &&
                (i + 1 < states.size() ? states[i].position < static_cast<std::int64_t>(tokens.size()) : states[i].position == static_cast<std::int64_t>(tokens.size()));
  if (!states_ok && !(meta.state_floats > 0 && tokens.empty() && states.empty()))
    throw Error(ErrorCategory::runtime, path.string(), "recurrent states that do not fit the model or the tokens");
  static std::atomic<std::uint64_t> counter{0};
  std::random_device rd;
  const std::string tmp = path.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rd()) + "." +
                          std::to_string(counter++);
  KVFileHeader h;
  h.dtype = static_cast<std::uint32_t>(meta.dtype);
  h.identity = meta.identity;
  h.n_layers = static_cast<std::uint32_t>(meta.n_layers), h.n_kv_heads = static_cast<std::uint32_t>(meta.n_kv_heads);
  h.head_dim = static_cast<std::uint32_t>(meta.head_dim);
  h.state_floats = static_cast<std::uint32_t>(meta.state_floats);
  h.n_tokens = tokens.size();
  h.tokens_hash = tokens_hash(tokens);
  h.payload_bytes = kv_payload_bytes(meta, tokens.size());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  std::FILE* out = fd < 0 ? nullptr : ::fdopen(fd, "wb");
  if (out == nullptr) {
    const int err = errno;
    if (fd >= 0) ::close(fd), std::remove(tmp.c_str());
    throw KVWriteError(path, err);
  }
  Xxh64 sum;
  int err = 0;  // the errno of the first failed call
  auto put = [&](std::span<const std::byte> b) {
    if (b.empty() || err != 0) return;  // no tokens: data() may be null
    sum.update(b);
    if (std::fwrite(b.data(), 1, b.size(), out) != b.size()) err = errno;
  };
  put(std::as_bytes(std::span(&h, 1)));
  put(std::as_bytes(tokens));
  for (std::int64_t l = 0; l < meta.n_layers; ++l)
    for (int kv = 0; kv < 2; ++kv)
      for (std::int64_t head = 0; head < meta.n_kv_heads; ++head) put(rows(l, kv, head));
  std::size_t states_section = 0;
  if (meta.state_floats > 0) {
    const std::uint64_t count = states.size();
    put(std::as_bytes(std::span(&count, 1)));
    for (const KVFileState& st : states) {
      const auto position = static_cast<std::uint64_t>(st.position);
      put(std::as_bytes(std::span(&position, 1)));
      put(st.bytes);
    }
    states_section = 8 + states.size() * (8 + state_bytes);
  }
  const std::uint64_t checksum = sum.digest();
  put(std::as_bytes(std::span(&checksum, 1)));
  if (std::fclose(out) != 0 && err == 0) err = errno;
  if (err == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    std::remove(tmp.c_str());
    throw KVWriteError(path, err);
  }
  return sizeof h + tokens.size_bytes() + h.payload_bytes + states_section + 8;
}

// n must be a position the cache can restore (KVCache::restorable): the state there goes with the rows, and
// with `snapshots`, every snapshot below n too (Session::save: a restored session resumes from them).
inline std::size_t write_kv_file(const std::filesystem::path& path, const KVFileMeta& meta, const KVCache& cache, std::int64_t n,
                                 bool snapshots = false) {
  if (n > cache.text_prefix())
    throw Error(ErrorCategory::io, path.string(), "the cache holds image tokens, whose positions a KV file does not keep: not saved");
  std::vector<std::byte> rows(cache.head_bytes(n));  // one head's rows at a time, through the host
  std::vector<std::int64_t> at;
  if (cache.has_states() && n > 0) {
    if (snapshots)
      for (std::int64_t p : cache.states().snapshots())
        if (p < n) at.push_back(p);
    if (at.size() >= max_kv_file_states) at.erase(at.begin(), at.end() - static_cast<std::ptrdiff_t>(max_kv_file_states - 1));
    at.push_back(n);
  }
  std::vector<std::vector<std::byte>> bytes(at.size(), std::vector<std::byte>(cache.state_bytes()));
  std::vector<KVFileState> states;
  for (std::size_t i = 0; i < at.size(); ++i) {
    cache.read_state(at[i], bytes[i]);
    states.push_back({at[i], bytes[i]});
  }
  return write_kv_file(
      path, meta, cache.tokens().first(static_cast<std::size_t>(n)),
      [&](std::int64_t l, int kv, std::int64_t head) {
        cache.read_rows(l, kv, head, n, rows);
        return std::span<const std::byte>(rows);
      },
      states);
}

// Whether every element of `bytes` (KV rows in `dtype`) is finite: an exponent of all ones is NaN
// or infinity in F32, F16 and BF16 alike. One pass over what was just read, while it is in cache.
inline bool all_finite(std::span<const std::byte> bytes, DType dtype) {
  auto check = [&](auto word, auto exponent) {
    using W = decltype(word);
    const std::size_t n = bytes.size() / sizeof(W);
    W bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      W w;
      std::memcpy(&w, bytes.data() + i * sizeof(W), sizeof(W));
      bad |= static_cast<W>((w & exponent) == exponent);
    }
    return bad == 0;
  };
  switch (dtype) {
    case DType::f32: return check(std::uint32_t{}, std::uint32_t{0x7F800000});
    case DType::f16: return check(std::uint16_t{}, std::uint16_t{0x7C00});
    case DType::bf16: return check(std::uint16_t{}, std::uint16_t{0x7F80});
    default: return true;
  }
}

// Reads a KV file in two steps: open() checks the header against `expected` and the file size and
// reads the token ids, so a caller can pick among files by their tokens; load_into() then reads
// the payload into a cache and checks the checksum. Every failure is a kylin::Error (io) naming the
// file and what is wrong; after a failed load_into the cache holds no tokens.
class KVFileReader {
 public:
  KVFileReader(const std::filesystem::path& path, const KVFileMeta& expected) : path_(path) {
    open_regular();
    struct stat st {};
    if (::fstat(fd_.fd, &st) != 0 || !S_ISREG(st.st_mode)) fail("not a regular file");
    dev_ = st.st_dev, ino_ = st.st_ino;
    if (!read(std::as_writable_bytes(std::span(&h_, 1))) || h_.magic != kv_file_magic) fail("not a kylin KV file (bad magic or too short)");
    if (h_.version != kv_file_version)
      fail("format version " + std::to_string(h_.version) + ", this kylin reads " + std::to_string(kv_file_version));
    if (h_.identity != expected.identity) fail("made by another model or checkpoint (identity differs)");
    if (h_.dtype != static_cast<std::uint32_t>(expected.dtype)) fail("KV dtype differs from the cache's " + std::string(dtype_name(expected.dtype)));
    if (h_.n_layers != expected.n_layers || h_.n_kv_heads != expected.n_kv_heads || h_.head_dim != expected.head_dim)
      fail("layer/head geometry differs from the model's");
    if (h_.state_floats != expected.state_floats) fail("recurrent state size differs from the model's");
    meta_ = expected;
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (h_.n_tokens > size / 4 || h_.payload_bytes != kv_payload_bytes(meta_, h_.n_tokens) ||
        size < sizeof h_ + 4 * h_.n_tokens + h_.payload_bytes + (h_.state_floats > 0 ? 8 : 0) + 8)
      fail("size " + std::to_string(size) + " does not match its header (truncated or damaged)");
    if (h_.state_floats > 0) {  // the states' count sits after the payload
      const auto at = static_cast<off_t>(sizeof h_ + 4 * h_.n_tokens + h_.payload_bytes);
      if (::pread(fd_.fd, &states_, 8, at) != 8 || states_ > max_kv_file_states || (states_ == 0) != (h_.n_tokens == 0))
        fail("recurrent states damaged (their count)");
    }
    if (size != file_bytes()) fail("size " + std::to_string(size) + " does not match its header (truncated or damaged)");
    tokens_.resize(static_cast<std::size_t>(h_.n_tokens));
    if (!read(std::as_writable_bytes(std::span(tokens_))) || tokens_hash(tokens_) != h_.tokens_hash) fail("token ids are damaged");
  }

  const std::filesystem::path& path() const { return path_; }
  std::span<const int> tokens() const { return tokens_; }
  std::size_t file_bytes() const { return sizeof h_ + h_.n_tokens * 4 + h_.payload_bytes + states_bytes() + 8; }
  std::size_t state_bytes() const { return static_cast<std::size_t>(h_.state_floats) * sizeof(float); }
  std::size_t states_bytes() const { return h_.state_floats > 0 ? 8 + static_cast<std::size_t>(states_) * (8 + state_bytes()) : 0; }

  // Reads the keys and values into `cache` (all of them; the cache must have room) and verifies
  // the checksum; then the cache holds tokens(). A NaN or infinite key or value is refused: the
  // checksum finds damage, not forgery (anyone can write a file with a valid one), and a model
  // never computes one.
  void load_into(KVCache& cache) {
    if (static_cast<std::int64_t>(tokens_.size()) > cache.capacity())
      fail("holds " + std::to_string(tokens_.size()) + " tokens; the context is " + std::to_string(cache.capacity()));
    cache.reset();
    try {
      read_payload(cache);
    } catch (...) {
      cache.reset();  // no rows or states of a damaged file stay behind
      throw;
    }
  }

  // Deletes the file if `path` still names the file this reader opened (another process may
  // have replaced it with a good one since).
  void remove_if_unchanged() const {
    struct stat st {};
    if (::stat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) ::unlink(path_.c_str());
  }

 private:
  void read_payload(KVCache& cache) {
    const auto n = static_cast<std::int64_t>(tokens_.size());
    std::vector<std::byte> rows(cache.head_bytes(n));  // one head's rows at a time, through the host
    for (std::int64_t l = 0; l < meta_.n_layers; ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (std::int64_t head = 0; head < meta_.n_kv_heads; ++head) {
          if (!read(rows)) fail("truncated while reading");
          if (!all_finite(rows, meta_.dtype))
            fail("holds a non-finite " + std::string(kv == 0 ? "key" : "value") + " (NaN or infinity) in layer " + std::to_string(l));
          cache.write_rows(l, kv, head, n, rows);
        }
    if (h_.state_floats > 0) read_states(cache);
    std::uint64_t checksum = 0;
    const std::uint64_t expected = sum_.digest();
    if (::pread(fd_.fd, &checksum, 8, static_cast<off_t>(file_bytes() - 8)) != 8 || checksum != expected) fail("checksum mismatch (damaged)");
    cache.restore(tokens_);
  }

  // The recurrent states into `cache`: positions ascending, the last after all the tokens, every value finite;
  // the ones before the last are kept as snapshots.
  void read_states(KVCache& cache) {
    std::uint64_t count = 0, last = 0;
    if (!read(std::as_writable_bytes(std::span(&count, 1))) || count != states_) fail("truncated while reading");
    std::vector<std::byte> state(state_bytes());
    for (std::uint64_t i = 0; i < count; ++i) {
      std::uint64_t position = 0;
      if (!read(std::as_writable_bytes(std::span(&position, 1))) || !read(state)) fail("truncated while reading");
      if (position <= last || position > h_.n_tokens || (i + 1 == count) != (position == h_.n_tokens))
        fail("recurrent state positions damaged (ascending, the last after every token)");
      if (!all_finite(state, DType::f32)) fail("holds a non-finite recurrent state (NaN or infinity)");
      cache.write_state(static_cast<std::int64_t>(position), state);
      if (i + 1 < count) cache.states().pin(static_cast<std::int64_t>(position));
      last = position;
    }
  }

  // Closes on every path, the constructor's throws included. Move-only.
  struct Fd {
    int fd = -1;
    Fd() = default;
    Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
    Fd& operator=(Fd&&) = delete;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  };

  [[noreturn]] void fail(const std::string& why) const { throw Error(ErrorCategory::io, path_.string(), why); }

  // Opens the file only if it is a regular file named directly: a symlink is never followed (it
  // could lead out of the directory), and a FIFO or device is never opened for reading, where
  // open() would wait for a writer. lstat refuses those before open; O_NOFOLLOW, O_NONBLOCK and
  // the caller's fstat close the race with a file swapped in between.
  void open_regular() {
    struct stat st {};
    if (::lstat(path_.c_str(), &st) != 0) fail(errno == ENOENT ? "no such file" : std::string("cannot open: ") + std::strerror(errno));
    if (S_ISLNK(st.st_mode)) fail("is a symbolic link, which is never followed");
    if (!S_ISREG(st.st_mode)) fail("not a regular file");
    fd_.fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd_.fd < 0 && errno == ELOOP) fail("is a symbolic link, which is never followed");
    if (fd_.fd < 0) fail(errno == ENOENT ? "no such file" : std::string("cannot open: ") + std::strerror(errno));
    const int flags = ::fcntl(fd_.fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd_.fd, F_SETFL, flags & ~O_NONBLOCK) != 0) fail(std::string("cannot open: ") + std::strerror(errno));
  }
  // Reads exactly out.size() bytes and adds them to the checksum.
  bool read(std::span<std::byte> out) {
    std::size_t done = 0;
    while (done < out.size()) {
      const ::ssize_t r = ::read(fd_.fd, out.data() + done, out.size() - done);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      done += static_cast<std::size_t>(r);
    }
    sum_.update(out);
    return true;
  }

  std::filesystem::path path_;
  Fd fd_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  KVFileHeader h_;
  std::uint64_t states_ = 0;  // recurrent states in the file
  KVFileMeta meta_;
  std::vector<int> tokens_;
  Xxh64 sum_;
};

}  // namespace kylin
