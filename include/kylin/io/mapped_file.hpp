// MappedFile: a read-only, RAII view of a whole file's bytes. Mapped (the default), weights are
// views into the page cache and loading copies nothing; copied, the bytes are read once into this
// process's own memory in huge pages (FileMemory).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <utility>

#include "kylin/core/error.hpp"
#include "kylin/core/huge_pages.hpp"

namespace kylin::io {

// populate: map every page now (MADV_POPULATE_READ, Linux 5.14+; read-ahead advice elsewhere),
// so the first forward pass does not pay ~300k page faults for a 1.2 GB checkpoint.
// release: drop the range's pages from this process (they are read again from the file if used).
// evict: release, and drop them from the page cache as well: for a file too large to stay cached,
// whose pages are better handed straight back for the memory being filled meanwhile.
enum class AccessHint { normal, sequential, random, will_need, populate, release, evict };

// Where the bytes live. mapped: the page cache, shared with other processes, paged in on first
// touch and free to load. copied: anonymous memory of this process, read in at open, 2 MiB-aligned
// with transparent huge pages asked for: on a VM whose mapped file pages streamed slowly, one
// sequence decoded 1.25-1.7x faster from the copy (docs/PERFORMANCE.md).
enum class FileMemory { mapped, copied };

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::filesystem::path& path, FileMemory memory = FileMemory::mapped)
      : path_(path.string()), memory_(memory) {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(ErrorCategory::io, path_, std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error(ErrorCategory::io, path_, "not a regular file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0 && memory == FileMemory::copied) {
      try {
        copy_in(fd);
      } catch (...) {
        ::close(fd);
        throw;
      }
    } else if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        throw Error(ErrorCategory::io, path_, std::string("mmap failed: ") + std::strerror(err));
      }
      data_ = static_cast<const std::byte*>(p);
      span_ = size_;
      fd_ = fd;  // kept for AccessHint::evict
      return;
    }
    ::close(fd);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept { swap(o); }
  MappedFile& operator=(MappedFile&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~MappedFile() { release(); }

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  FileMemory memory() const { return memory_; }

  // Advice only: failures are ignored because the mapping works the same without it. A copy is
  // resident already, and dropping its pages would lose the bytes (anonymous memory reads back
  // as zeros), so it takes no advice.
  void advise(AccessHint hint, std::size_t offset = 0, std::size_t length = SIZE_MAX) const {
    if (!data_ || offset >= size_ || memory_ == FileMemory::copied) return;
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t begin = offset / page * page;
    const std::size_t end = length > size_ - offset ? size_ : offset + length;
    void* addr = const_cast<std::byte*>(data_ + begin);
#ifdef MADV_POPULATE_READ
    if (hint == AccessHint::populate && ::madvise(addr, end - begin, MADV_POPULATE_READ) == 0) return;
#endif
    if (hint == AccessHint::evict) {
      ::madvise(addr, end - begin, MADV_DONTNEED);
      ::posix_fadvise(fd_, static_cast<off_t>(begin), static_cast<off_t>(end - begin), POSIX_FADV_DONTNEED);
      return;
    }
    const int advice = hint == AccessHint::sequential ? MADV_SEQUENTIAL
                       : hint == AccessHint::random   ? MADV_RANDOM
                       : hint == AccessHint::release  ? MADV_DONTNEED
                       : hint == AccessHint::will_need || hint == AccessHint::populate ? MADV_WILLNEED
                                                                                        : MADV_NORMAL;
    ::madvise(addr, end - begin, advice);
  }

 private:
  // Reads the file into fresh anonymous memory starting on a 2 MiB boundary (so every 2 MiB of it
  // can be one huge page), then makes it read-only like the mapping.
  void copy_in(int fd) {
    std::byte* const base = kylin::detail::map_huge(size_);
    if (!base) {
      const int err = errno;
      throw Error(ErrorCategory::io, path_, "cannot allocate " + std::to_string(size_) + " bytes to copy the file into: " + std::strerror(err));
    }
    const std::size_t span = kylin::detail::huge_span(size_);
    data_ = base;
    span_ = span;
    constexpr std::size_t chunk = std::size_t{1} << 30;  // pread moves at most ~2 GiB a call
    for (std::size_t done = 0; done < size_;) {
      const ssize_t got = ::pread(fd, base + done, std::min(chunk, size_ - done), static_cast<off_t>(done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        const int err = errno;
        const std::string why = got == 0 ? "the file ended at byte " + std::to_string(done) + " while it was copied (it shrank)"
                                         : std::string("cannot read: ") + std::strerror(err);
        release();
        throw Error(ErrorCategory::io, path_, why);
      }
      done += static_cast<std::size_t>(got);
    }
    ::mprotect(base, span, PROT_READ);
  }

  void release() noexcept {
    if (data_) ::munmap(const_cast<std::byte*>(data_), span_);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    data_ = nullptr;
    size_ = span_ = 0;
  }
  void swap(MappedFile& o) noexcept {
    std::swap(path_, o.path_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(span_, o.span_);
    std::swap(memory_, o.memory_);
    std::swap(fd_, o.fd_);
  }

  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t span_ = 0;  // bytes to unmap: size_ when mapped, whole huge pages when copied
  FileMemory memory_ = FileMemory::mapped;
  int fd_ = -1;  // the mapped file, open (-1 when copied or empty)
};

// Asks for the pages of `bytes` bytes at `data` (inside a mapping) to be read in now, without waiting for
// them: a routed expert's matrices the next matmul pass reads (--experts mapped). Advice only.
inline void will_need(const void* data, std::size_t bytes) {
  const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(data) / page * page, end = reinterpret_cast<std::uintptr_t>(data) + bytes;
  if (bytes > 0) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
}

}  // namespace kylin::io
