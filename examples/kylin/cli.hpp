// The kylin CLI's command registry: each examples/kylin/cmd_*.cpp adds one subcommand by
// defining a static `Registrar`, so a new command touches only its own file.
#pragma once

#include <CLI/CLI.hpp>

#include "kylin/model/model.hpp"

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

// --backend, shared by the commands that load a model: one of the backends this program has.
inline void add_backend_option(CLI::App* cmd, std::string& backend) {
  cmd->add_option("--backend", backend, "Where the model runs (default cpu), one of:\n" + kylin::backends().describe())
      ->check(CLI::Validator([](const std::string& name) { return kylin::backends().check(name); }, "BACKEND"));
}

// --prefill-activations, shared by the commands that prefill (the server has its own copy).
inline void add_prefill_activations_option(CLI::App* cmd, std::string& value) {
  cmd->add_option("--prefill-activations", value, "What the prefill GEMM of BF16 weights multiplies: f32 activations (exact, the default) or activations rounded to BF16 (faster where the CPU has AVX512_BF16, not exact; docs/PERFORMANCE.md)")
      ->check(CLI::IsMember({"f32", "bf16"}));
}

// Parses "1,2,3" into ids; throws kylin::Error naming the bad item.
std::vector<int> parse_id_list(const std::string& text);

}  // namespace kylin::cli
