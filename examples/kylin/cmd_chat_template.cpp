// `kylin chat-template`: renders chat messages with a model directory's own chat template
// (tokenizer files only, no weights). One JSON case per stdin line in, one JSON string out.
#include <iostream>
#include <memory>
#include <string>

#include "kylin/chat/chat_template.hpp"
#include "kylin/cli.hpp"
#include "kylin/core/json.hpp"

namespace cmd_chat_template {

// {"messages": [...], "kwargs": {...}?, "tools": [...]?, "add_generation_prompt": bool?}
// add_generation_prompt defaults to true here; tools may also sit inside kwargs.
std::string render_case(const kylin::ChatTemplate& tmpl, const std::string& line, std::size_t line_no) {
  const std::string where = "stdin line " + std::to_string(line_no);
  const kylin::json::Value c = kylin::json::parse(line, where, kylin::ErrorCategory::request);
  const kylin::json::Value* messages = c.find("messages");
  if (!messages) throw kylin::Error(kylin::ErrorCategory::request, where, "missing \"messages\"");
  kylin::RenderOptions options;
  options.add_generation_prompt = true;
  if (const auto* agp = c.find("add_generation_prompt")) {
    if (!agp->is_bool()) throw kylin::Error(kylin::ErrorCategory::request, where, "add_generation_prompt must be a bool");
    options.add_generation_prompt = agp->as_bool();
  }
  if (const auto* kwargs = c.find("kwargs")) options.kwargs = *kwargs;
  if (const auto* tools = c.find("tools")) options.tools = *tools;
  return kylin::json::dump(tmpl.render(*messages, options));
}

int run(const std::string& model_dir) {
  const kylin::ChatTemplate tmpl = kylin::ChatTemplate::from_dir(model_dir);
  std::string line;
  std::size_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::cout << render_case(tmpl, line, line_no) << '\n';
  }
  std::cout.flush();
  return 0;
}

const kylin::cli::Registrar registrar{"chat-template", [](CLI::App& app) {
  auto model = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("chat-template",
                                 "Render chat cases (JSON lines on stdin) with the model's chat template");
  cmd->add_option("--model", *model, "Model or tokenizer directory (tokenizer_config.json)")->required();
  cmd->callback([model] { kylin::cli::exit_code() = run(*model); });
}};

}  // namespace cmd_chat_template
