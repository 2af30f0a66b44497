// A fresh directory under the system temp dir, removed with everything in it on destruction:
// the one scratch directory of the tests (io fixtures, prompt cache files).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace kylin::test {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kylin-test-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

  // The files directly inside, those ending in `extension` when one is given (".kvc").
  std::vector<std::filesystem::path> files(std::string_view extension = {}) const {
    std::vector<std::filesystem::path> out;
    for (const auto& e : std::filesystem::directory_iterator(path_))
      if (extension.empty() || e.path().extension() == extension) out.push_back(e.path());
    return out;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace kylin::test
