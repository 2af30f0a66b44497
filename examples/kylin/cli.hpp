// The kylin CLI's command registry: each examples/kylin/cmd_*.cpp adds one subcommand by
// defining a static `Registrar`, so a new command touches only its own file.
#pragma once

#include <CLI/CLI.hpp>

#include "kylin/backends/cuda/module.hpp"

#include <functional>
#include <string>
#include <vector>

namespace kylin::cli {

// `setup` adds the subcommand to the app; its callback stores the process exit code in `exit_code()`.
struct Command {
  std::string name;
  std::function<void(CLI::App&)> setup;
};

inline std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

inline int& exit_code() {
  static int code = 0;
  return code;
}

struct Registrar {
  Registrar(std::string name, std::function<void(CLI::App&)> setup) {
    registry().push_back({std::move(name), std::move(setup)});
  }
};

// --backend cpu|cuda, shared by the commands that load a model.
inline void add_backend_option(CLI::App* cmd, std::string& backend) {
  cmd->add_option("--backend", backend, "Where the model runs: cpu, or cuda (a KYLIN_CUDA build with a GPU; docs/CUDA.md)")->check(CLI::IsMember({"cpu", "cuda"}));
}

// The backend --backend names (checked by the option), made ready to load: for cuda, the
// backend module beside kylin is loaded now.
inline kylin::BackendKind backend_kind(const std::string& name) {
  const kylin::BackendKind kind = *kylin::parse_backend_kind(name);
  kylin::cuda::prepare_backend(kind);
  return kind;
}

// Parses "1,2,3" into ids; throws kylin::Error naming the bad item.
std::vector<int> parse_id_list(const std::string& text);

}  // namespace kylin::cli
