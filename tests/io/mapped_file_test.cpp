// MappedFile: a whole file mapped read-only or copied into own memory, errors naming the path, moves
// that transfer the mapping or copy, and the byte-exact contents visible through bytes(), advice
// (pages released or evicted from the page cache included) leaving them as they are.
#include "kylin/io/mapped_file.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>

#include "helpers.hpp"
#include "kylin/io/checkpoint.hpp"

using kylin::io::MappedFile;
using namespace kylin::test;

TEST_CASE("a mapped file shows exactly the file's bytes, and read_text_file returns them as text") {
  TempDir dir;
  const auto bytes = pattern_bytes(10000, 3);
  write_file(dir / "f.bin", bytes);
  const MappedFile f(dir / "f.bin");
  REQUIRE(f.size() == bytes.size());
  CHECK(std::equal(bytes.begin(), bytes.end(), f.bytes().begin()));
  CHECK(f.path() == (dir / "f.bin").string());
  f.advise(kylin::io::AccessHint::will_need);  // advice only: must not change the contents
  f.advise(kylin::io::AccessHint::random, 5000, 1 << 30);
  CHECK(std::equal(bytes.begin(), bytes.end(), f.bytes().begin()));
  f.advise(kylin::io::AccessHint::evict, 4096, 4096);  // dropped pages are read again from the file
  f.advise(kylin::io::AccessHint::evict);
  CHECK(std::equal(bytes.begin(), bytes.end(), f.bytes().begin()));
  write_file(dir / "t.txt", std::string_view("h\xc3\xa9llo\n"));
  CHECK(kylin::io::read_text_file(dir / "t.txt") == "h\xc3\xa9llo\n");
}

TEST_CASE("an empty file maps to an empty span") {
  TempDir dir;
  write_file(dir / "empty", std::vector<std::byte>{});
  const MappedFile f(dir / "empty");
  CHECK(f.size() == 0);
  CHECK(f.bytes().empty());
}

TEST_CASE("a missing path or a directory is an io error naming the path") {
  TempDir dir;
  CHECK(contains(error_text([&] { MappedFile f(dir / "missing"); }),
                 std::string("[kylin.io] ") + (dir / "missing").string() + ": cannot open: No such file or directory"));
  CHECK(contains(error_text([&] { MappedFile f(dir.path()); }), (dir.path()).string() + ": not a regular file"));
}

TEST_CASE("moving a mapping transfers it; the moved-from object is empty") {
  TempDir dir;
  write_file(dir / "f", pattern_bytes(64));
  MappedFile a(dir / "f");
  const std::byte* p = a.data();
  MappedFile b(std::move(a));
  CHECK(b.data() == p);
  CHECK(a.data() == nullptr);
  CHECK(a.size() == 0);
  MappedFile c;
  c = std::move(b);
  CHECK(c.data() == p);
  CHECK(c.size() == 64);
}

// Overwrites the file's bytes in place (no truncation: a mapping past a truncated end would fault).
static void overwrite_in_place(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

TEST_CASE("a copied file holds the file's bytes in its own 2 MiB-aligned memory: later writes to the file do not show") {
  TempDir dir;
  const auto before = pattern_bytes(3 << 20, 5), after = pattern_bytes(3 << 20, 9);  // spans two huge pages
  write_file(dir / "f.bin", before);
  const MappedFile mapped(dir / "f.bin");
  const MappedFile copied(dir / "f.bin", kylin::io::FileMemory::copied);
  CHECK(mapped.memory() == kylin::io::FileMemory::mapped);
  CHECK(copied.memory() == kylin::io::FileMemory::copied);
  REQUIRE(copied.size() == before.size());
  CHECK(reinterpret_cast<std::uintptr_t>(copied.data()) % (std::uintptr_t{2} << 20) == 0);
  CHECK(std::equal(before.begin(), before.end(), copied.bytes().begin()));
  overwrite_in_place(dir / "f.bin", after);
  CHECK(std::equal(after.begin(), after.end(), mapped.bytes().begin()));  // the mapping is the page cache
  CHECK(std::equal(before.begin(), before.end(), copied.bytes().begin()));
}

TEST_CASE("advice never changes a copy: even release (which drops a mapping's pages) keeps its bytes") {
  TempDir dir;
  const auto bytes = pattern_bytes(100000, 4);
  write_file(dir / "f.bin", bytes);
  const MappedFile f(dir / "f.bin", kylin::io::FileMemory::copied);
  for (auto hint : {kylin::io::AccessHint::release, kylin::io::AccessHint::populate, kylin::io::AccessHint::random}) f.advise(hint);
  f.advise(kylin::io::AccessHint::release, 4096, 50000);
  CHECK(std::equal(bytes.begin(), bytes.end(), f.bytes().begin()));
}

TEST_CASE("copying: an empty file gives an empty span, a missing one an io error naming it, a move transfers the copy") {
  TempDir dir;
  write_file(dir / "empty", std::vector<std::byte>{});
  CHECK(MappedFile(dir / "empty", kylin::io::FileMemory::copied).bytes().empty());
  CHECK(contains(error_text([&] { MappedFile f(dir / "missing", kylin::io::FileMemory::copied); }),
                 (dir / "missing").string() + ": cannot open: No such file or directory"));
  write_file(dir / "f", pattern_bytes(64));
  MappedFile a(dir / "f", kylin::io::FileMemory::copied);
  const std::byte* p = a.data();
  MappedFile b;
  b = std::move(a);
  CHECK(b.data() == p);
  CHECK(b.memory() == kylin::io::FileMemory::copied);
  CHECK(a.data() == nullptr);
  CHECK(std::equal(b.bytes().begin(), b.bytes().end(), pattern_bytes(64).begin()));
}
