// Checkpoint: every tensor of a Hugging Face model directory, from one model.safetensors or from
// the shards that model.safetensors.index.json's weight_map names. Lookup is by HF tensor name.
#pragma once

#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "kylin/core/json.hpp"
#include "kylin/io/safetensors.hpp"

namespace kylin::io {

inline std::string read_text_file(const std::filesystem::path& path) {
  MappedFile f(path);
  return std::string(reinterpret_cast<const char*>(f.data()), f.size());
}

class Checkpoint {
 public:
  explicit Checkpoint(const std::filesystem::path& dir, FileMemory memory = FileMemory::mapped) : dir_(dir), memory_(memory) {
    namespace fs = std::filesystem;
    if (!fs::is_directory(dir)) throw Error(ErrorCategory::load, dir.string(), "not a directory");
    const auto index = dir / "model.safetensors.index.json";
    const auto single = dir / "model.safetensors";
    if (fs::exists(index)) {
      open_sharded(index);
    } else if (fs::exists(single)) {
      files_.push_back(std::make_unique<SafetensorsFile>(single, memory_));
      for (const auto& t : files_.back()->tensors()) add(t);
    } else {
      throw Error(ErrorCategory::load, dir.string(), "no model.safetensors or model.safetensors.index.json");
    }
  }

  const TensorView* find(std::string_view name) const {
    auto it = by_name_.find(std::string(name));
    return it == by_name_.end() ? nullptr : it->second;
  }
  // All tensors, in file order then header order.
  std::vector<const TensorView*> tensors() const {
    std::vector<const TensorView*> out;
    for (const auto& f : files_)
      for (const auto& t : f->tensors()) out.push_back(&t);
    return out;
  }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  const std::filesystem::path& dir() const { return dir_; }
  std::size_t total_bytes() const {
    std::size_t n = 0;
    for (const auto& f : files_) n += f->mapping().size();
    return n;
  }
  void advise(AccessHint hint) const {
    for (const auto& f : files_) f->mapping().advise(hint);
  }
  // The same for the `bytes` bytes at `data`, inside one of the mapped files.
  void advise(AccessHint hint, const void* data, std::size_t bytes) const {
    const auto* p = static_cast<const std::byte*>(data);
    for (const auto& f : files_) {
      const MappedFile& m = f->mapping();
      if (p >= m.data() && p < m.data() + m.size()) m.advise(hint, static_cast<std::size_t>(p - m.data()), bytes);
    }
  }

 private:
  void add(const TensorView& t) {
    auto [it, inserted] = by_name_.emplace(t.name, &t);
    if (!inserted)
      throw Error(ErrorCategory::load, *t.file + ": " + t.name, "duplicate tensor name (also in " + *it->second->file + ")");
  }

  void open_sharded(const std::filesystem::path& index_path) {
    const std::string where = index_path.string();
    const json::Value index = json::parse(read_text_file(index_path), where, ErrorCategory::load);
    const json::Value* map = index.find("weight_map");
    if (!map || !map->is_object()) throw Error(ErrorCategory::load, where, "missing object \"weight_map\"");
    std::vector<std::string> shard_names;
    for (const auto& [tensor, shard] : map->as_object()) {
      if (!shard.is_string()) throw Error(ErrorCategory::load, where + ": " + tensor, "weight_map value must be a file name");
      const std::string& s = shard.as_string();
      if (s.empty() || s.find('/') != std::string::npos || s == "..")
        throw Error(ErrorCategory::load, where + ": " + tensor, "shard name \"" + s + "\" must be a plain file name");
      if (std::find(shard_names.begin(), shard_names.end(), s) == shard_names.end()) shard_names.push_back(s);
    }
    std::unordered_map<std::string, const SafetensorsFile*> shard_by_name;
    for (const auto& s : shard_names) {
      const auto path = dir_ / s;
      if (!std::filesystem::exists(path))
        throw Error(ErrorCategory::load, where, "shard \"" + s + "\" is listed in weight_map but missing from " + dir_.string());
      files_.push_back(std::make_unique<SafetensorsFile>(path, memory_));
      shard_by_name[s] = files_.back().get();
      for (const auto& t : files_.back()->tensors()) add(t);
    }
    for (const auto& [tensor, shard] : map->as_object())
      if (!shard_by_name[shard.as_string()]->find(tensor))
        throw Error(ErrorCategory::load, where + ": " + tensor, "weight_map names shard \"" + shard.as_string() + "\" but the shard lacks this tensor");
  }

  std::filesystem::path dir_;
  FileMemory memory_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, const TensorView*> by_name_;
};

}  // namespace kylin::io
