// MappedFile: a whole file mapped read-only, errors naming the path, moves that transfer the
// mapping, and the byte-exact contents visible through bytes().
#include "kylin/io/mapped_file.hpp"

#include <doctest/doctest.h>

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
