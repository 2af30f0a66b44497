// Backends by name: what ModelOptions::backend, `--backend` and `--help` know. The CPU is always
// there; a backend linked into a program registers itself with one BackendRegistration in its own
// folder; one built as a module, libkylin-backend-<name>.so beside the program, is listed by its
// file name and loaded the first time it is asked for (ggml's backend registry is the model).
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "kylin/core/error.hpp"

namespace kylin {

namespace detail {
class AnyModel;
}
struct ModelOptions;

// Loads a Hugging Face directory on one backend.
using ModelFactory = std::unique_ptr<detail::AnyModel> (*)(const std::filesystem::path&, const ModelOptions&);

struct BackendEntry {
  std::string_view name;     // what --backend takes
  std::string_view summary;  // one line for --help
  ModelFactory load = nullptr;
};

// A backend module's one export: extern "C" const BackendEntry* kylin_backend_entry(), its entry
// in static storage (the module stays loaded for the process).
inline constexpr const char* backend_module_entry = "kylin_backend_entry";
inline constexpr std::string_view backend_module_prefix = "libkylin-backend-";
inline constexpr std::string_view backend_module_suffix = ".so";
using BackendModuleEntry = const BackendEntry* (*)();

// The folder of the running program, where kylin's build and install put its modules.
inline std::filesystem::path program_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path(".") : exe.parent_path();
}

// The address of `symbol` in the shared module `file`, which stays loaded for the process. Throws
// naming `what` (the backend or kernel set it is for) and the file.
inline void* module_symbol(const std::filesystem::path& file, const char* symbol, std::string_view what) {
  void* handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw Error(ErrorCategory::runtime, std::string(what), "cannot load " + file.string() + ": " + ::dlerror());
  void* address = ::dlsym(handle, symbol);
  if (!address) throw Error(ErrorCategory::runtime, std::string(what), file.string() + " has no " + symbol);
  return address;
}

class BackendRegistry {
 public:
  explicit BackendRegistry(const BackendEntry& builtin) { add(builtin); }

  // Adds the backend e.name, or replaces the one of that name.
  void add(const BackendEntry& e) {
    const std::scoped_lock lock(mu_);
    auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& x) { return x.name == e.name; });
    if (it == entries_.end()) it = entries_.insert(entries_.end(), Entry{std::string(e.name), {}, nullptr});
    it->summary = std::string(e.summary);
    it->load = e.load;
  }

  // Every backend a program can ask for: those registered, in order, then the modules found
  // beside it that are not loaded yet.
  std::vector<std::string> names() const {
    const std::scoped_lock lock(mu_);
    std::vector<std::string> out;
    for (const Entry& e : entries_) out.push_back(e.name);
    for (const std::string& m : module_names())
      if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
    return out;
  }
  bool has(std::string_view name) const {
    const auto all = names();
    return std::find(all.begin(), all.end(), name) != all.end();
  }
  // Empty when `name` is a backend of this program; else what --backend says about it.
  std::string check(std::string_view name) const {
    if (has(name)) return {};
    std::string known;
    for (const std::string& n : names()) known += (known.empty() ? "" : ", ") + n;
    return "no backend named '" + std::string(name) + "' in this program; it has: " + known;
  }
  // One line per backend for --help: "name  summary" (a module not loaded yet: its file).
  std::string describe() const {
    std::string out;
    for (const std::string& n : names()) {
      const std::scoped_lock lock(mu_);
      const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& x) { return x.name == n; });
      out += "  " + n + "  " + (it != entries_.end() ? it->summary : "(module " + module_file(n).filename().string() + ")") + "\n";
    }
    return out;
  }

  // The loader of backend `name`, its module loaded first where it is one. Throws naming the
  // backend and the ones this program has.
  ModelFactory factory(std::string_view name) {
    {
      const std::scoped_lock lock(mu_);
      for (const Entry& e : entries_)
        if (e.name == name && e.load) return e.load;
    }
    const std::filesystem::path file = module_file(name);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) throw unknown(name, "no " + file.string());
    const auto entry = reinterpret_cast<BackendModuleEntry>(module_symbol(file, backend_module_entry, "backend " + std::string(name)));
    const BackendEntry* e = entry();
    if (!e || e->name != name || !e->load)
      throw Error(ErrorCategory::runtime, "backend", std::string(name) + ": " + file.string() + " is not the module of backend " + std::string(name));
    add(*e);
    return e->load;
  }

  // Where modules are looked for: beside the running program unless set.
  void set_module_dir(std::filesystem::path dir) {
    const std::scoped_lock lock(mu_);
    module_dir_ = std::move(dir);
  }

 private:
  struct Entry {
    std::string name, summary;
    ModelFactory load;
  };

  std::filesystem::path module_dir() const { return module_dir_.empty() ? program_dir() : module_dir_; }
  std::filesystem::path module_file(std::string_view name) const {
    return module_dir() / (std::string(backend_module_prefix) + std::string(name) + std::string(backend_module_suffix));
  }
  std::vector<std::string> module_names() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& f : std::filesystem::directory_iterator(module_dir(), ec)) {
      const std::string file = f.path().filename().string();
      if (file.size() > backend_module_prefix.size() + backend_module_suffix.size() && file.starts_with(backend_module_prefix) &&
          file.ends_with(backend_module_suffix))
        out.push_back(file.substr(backend_module_prefix.size(), file.size() - backend_module_prefix.size() - backend_module_suffix.size()));
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  Error unknown(std::string_view name, const std::string& why) const {
    return Error(ErrorCategory::config, "backend", check(name) + " (" + why + ")");
  }

  mutable std::recursive_mutex mu_;
  std::vector<Entry> entries_;
  std::filesystem::path module_dir_;
};

}  // namespace kylin
