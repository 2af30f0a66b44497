// kylin: the command-line front end. Subcommands live in cmd_*.cpp; errors print one line.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <exception>

#include "kylin/cli.hpp"
#include "kylin/core/error.hpp"
#include "kylin/model/model.hpp"

namespace kylin::cli {

std::vector<int> parse_id_list(const std::string& text) {
  std::vector<int> ids;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    int value = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || value < 0)
      throw Error(ErrorCategory::request, "token list", "'" + item + "' is not a non-negative integer id");
    ids.push_back(value);
    pos = end + 1;
  }
  return ids;
}

}  // namespace kylin::cli

int main(int argc, char** argv) {
  CLI::App app{"kylin: run Qwen3/Qwen2 Hugging Face checkpoints"};
  app.require_subcommand(1);
  // The CPU kernel set is chosen (its module loaded) only when asked for, not at every start.
  app.set_version_flag("--version", [] { return kylin::version_string("kylin"); });
  auto& commands = kylin::cli::registry();
  std::sort(commands.begin(), commands.end(), [](auto& a, auto& b) { return a.name < b.name; });
  for (auto& command : commands) command.setup(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kylin::Error& e) {
    std::fprintf(stderr, "kylin: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kylin: error: %s\n", e.what());
    return 1;
  }
  return kylin::cli::exit_code();
}
