// `kylin tokenize` and `kylin detokenize`: text <-> token ids with a model directory's
// tokenizer files only (tokenizer.json, or vocab.json + merges.txt); no weights needed.
#include <iostream>
#include <memory>
#include <string>

#include "kylin/cli.hpp"
#include "kylin/core/json.hpp"
#include "kylin/tokenizer/tokenizer.hpp"

namespace cmd_tokenize {

std::string ids_to_json(const std::vector<int>& ids) {
  kylin::json::Array array(ids.begin(), ids.end());
  return kylin::json::dump(kylin::json::Value(std::move(array)), {.item_separator = ", "});
}

struct TokenizeArgs {
  std::string model;
  std::string format = "plain";
  std::string text;
  bool jsonl = false;
  bool split_special = false;
  bool add_special_tokens = false;
};

// --jsonl: one JSON string per input line -> one JSON id array per output line.
void tokenize_jsonl(const kylin::Tokenizer& tokenizer, const kylin::EncodeOptions& options) {
  std::string line;
  for (int number = 1; std::getline(std::cin, line); ++number) {
    if (line.empty()) continue;
    const std::string where = "stdin line " + std::to_string(number);
    const kylin::json::Value value = kylin::json::parse(line, where, kylin::ErrorCategory::request);
    if (!value.is_string()) throw kylin::Error(kylin::ErrorCategory::request, where, "expected a JSON string");
    std::cout << ids_to_json(tokenizer.encode(value.as_string(), options)) << '\n';
  }
}

void run_tokenize(const TokenizeArgs& args) {
  const auto tokenizer = kylin::Tokenizer::from_dir(args.model);
  const kylin::EncodeOptions options{.parse_special = !args.split_special, .add_special_tokens = args.add_special_tokens};
  if (args.jsonl) return tokenize_jsonl(tokenizer, options);
  const auto ids = tokenizer.encode(args.text, options);
  if (args.format == "json") {
    std::cout << "{\"ids\": " << ids_to_json(ids) << "}\n";
    return;
  }
  for (std::size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i];
  std::cout << '\n';
}

const kylin::cli::Registrar tokenize_command("tokenize", [](CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  cmd->add_option("--model", args->model, "Model directory (only its tokenizer files are read)")->required();
  cmd->add_option("--format", args->format, "plain: ids comma-separated; json: {\"ids\": [...]}")
      ->check(CLI::IsMember({"plain", "json"}));
  cmd->add_flag("--jsonl", args->jsonl, "Read one JSON string per stdin line, print one JSON id array per line");
  cmd->add_flag("--split-special", args->split_special,
                "Encode special-token text such as <|im_start|> as plain text");
  cmd->add_flag("--add-special-tokens", args->add_special_tokens,
                "Apply tokenizer.json's post_processor (HF add_special_tokens=True), e.g. Qwen3-Embedding's trailing <|endoftext|>");
  CLI::Option* text = cmd->add_option("text", args->text, "The text to tokenize");
  cmd->callback([args, text] {
    if (!args->jsonl && text->count() == 0)
      throw CLI::ValidationError("text", "give a text to tokenize, or --jsonl to read stdin");
    run_tokenize(*args);
  });
});

struct DetokenizeArgs {
  std::string model;
  std::string ids;
  bool skip_special = false;
};

const kylin::cli::Registrar detokenize_command("detokenize", [](CLI::App& app) {
  auto args = std::make_shared<DetokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("detokenize", "Print the text of comma-separated token ids, then a newline");
  cmd->add_option("--model", args->model, "Model directory (only its tokenizer files are read)")->required();
  cmd->add_flag("--skip-special", args->skip_special, "Leave out special tokens such as <|im_end|>");
  cmd->add_option("ids", args->ids, "Token ids, e.g. 9707,1879,0")->required();
  cmd->callback([args] {
    const auto tokenizer = kylin::Tokenizer::from_dir(args->model);
    const auto ids = kylin::cli::parse_id_list(args->ids);
    std::cout << tokenizer.decode(ids, {.skip_special = args->skip_special}) << '\n';
  });
});

}  // namespace cmd_tokenize
