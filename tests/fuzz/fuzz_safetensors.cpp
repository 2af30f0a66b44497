// libFuzzer target: any byte string given to the safetensors reader either throws kylin::Error
// or yields tensors whose views lie inside the buffer (or an aligned copy) and whose byte size
// is exactly shape product x dtype size. Anything else (a crash, a sanitizer report) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "kylin/io/safetensors.hpp"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const kylin::io::SafetensorsFile file("fuzz.safetensors", bytes);
    const std::byte* end = bytes.data() + bytes.size();
    for (const auto& t : file.tensors()) {
      require(t.nbytes == static_cast<std::size_t>(t.numel()) * kylin::dtype_size(t.dtype));
      require(reinterpret_cast<std::uintptr_t>(t.data) % kylin::dtype_size(t.dtype) == 0);
      const bool in_buffer = t.data >= bytes.data() && t.data + t.nbytes <= end;
      if (in_buffer) require(t.data == end - (bytes.size() - 8 - kylin::io::detail::read_u64_le(bytes.data())) + t.offset);
      volatile std::uint8_t sink = 0;  // touch both ends: ASan reports a view outside its memory
      if (t.nbytes) sink = static_cast<std::uint8_t>(t.data[0]) ^ static_cast<std::uint8_t>(t.data[t.nbytes - 1]);
      (void)sink;
      require(file.find(t.name) != nullptr);
    }
  } catch (const kylin::Error&) {
  }
  return 0;
}
