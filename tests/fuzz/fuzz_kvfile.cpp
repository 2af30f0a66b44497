// libFuzzer target: any byte string read as a KV-cache file (generate/kv_file.hpp) by a cache of
// 2 layers x 2 KV heads x head_dim 4, f32, 16 positions either is refused with kylin::Error (and a
// failed load leaves the cache empty) or loads exactly the tokens its header lists, with the file's
// size and checksum what the format says. A crash, hang or sanitizer report is a bug.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>

#include "kylin/generate/kv_file.hpp"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

// The identity the seeds in tests/fuzz/corpus/kvfile carry (written by write_kv_file).
constexpr std::uint64_t fuzz_identity = 0x6b796c696e6b7663ULL;

kylin::ModelConfig fuzz_config() {
  kylin::ModelConfig c;
  c.num_hidden_layers = 2;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  return c;
}

// The reader takes a path and reads only a regular file named directly (no /proc/self/fd link):
// one temporary file per process, rewritten for each input and removed at exit.
const std::string& input_path() {
  struct File {
    std::string path = (std::filesystem::temp_directory_path() / ("kylin-fuzz-kvfile-" + std::to_string(::getpid()) + ".kvc")).string();
    ~File() { ::unlink(path.c_str()); }
  };
  static const File file;
  return file.path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = input_path();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  require(fd >= 0);
  for (std::size_t done = 0; done < size;) {
    const ::ssize_t w = ::write(fd, data + done, size - done);
    require(w > 0);
    done += static_cast<std::size_t>(w);
  }
  ::close(fd);
  const kylin::ModelConfig config = fuzz_config();
  const kylin::KVFileMeta meta{fuzz_identity, kylin::DType::f32, config.num_hidden_layers, config.num_key_value_heads, config.head_dim};
  constexpr std::int64_t capacity = 16;
  kylin::KVCache cache(config, capacity, kylin::DType::f32,
                       kylin::CpuBackend::allocate(kylin::KVCache::bytes_needed(config, capacity, kylin::DType::f32)));
  try {
    kylin::KVFileReader reader(path, meta);
    require(reader.file_bytes() == size);
    require(size == sizeof(kylin::KVFileHeader) + 4 * reader.tokens().size() + kylin::kv_payload_bytes(meta, reader.tokens().size()) + 8);
    try {
      reader.load_into(cache);
      require(cache.size() == static_cast<std::int64_t>(reader.tokens().size()));
      require(std::equal(cache.tokens().begin(), cache.tokens().end(), reader.tokens().begin()));
      std::uint64_t stored = 0;
      std::memcpy(&stored, data + size - 8, 8);
      require(stored == kylin::xxh64(std::as_bytes(std::span(data, size - 8))));
    } catch (const kylin::Error&) {
      require(cache.size() == 0);
    }
  } catch (const kylin::Error&) {
  }
  return 0;
}
