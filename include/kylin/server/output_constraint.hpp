// What a request demands of its answer (response_format or text.format: JSON, under a schema or
// not; grammar: a GBNF sentence; tool_choice: a call must be made, or a named one) and the
// constrain::Constraint that enforces it while the answer is sampled. Grammars compile on the
// request thread, so a bad one is a 400.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kylin/constrain/constraint.hpp"
#include "kylin/constrain/gbnf.hpp"
#include "kylin/constrain/json_schema.hpp"
#include "kylin/constrain/tool_call_grammar.hpp"
#include "kylin/constrain/tool_call_xml_grammar.hpp"
#include "kylin/generate/engine.hpp"
#include "kylin/server/api_error.hpp"
#include "kylin/server/tool_calls.hpp"

namespace kylin::server {

struct ResponseFormat {
  enum class Type { text, json_object, json_schema, gbnf };
  Type type = Type::text;
  json::Value schema;  // json_schema: the schema; null: any JSON value
  std::string gbnf;    // gbnf: the grammar (llama.cpp's `grammar` field)
  const char* schema_param = nullptr;  // where the request put the schema, when not OutputRules' default
};

enum class ToolChoiceMode { automatic, none, required, named };

struct ToolChoice {
  ToolChoiceMode mode = ToolChoiceMode::automatic;
  std::string name;  // named: the one function to call
  bool forces_call() const { return mode == ToolChoiceMode::required || mode == ToolChoiceMode::named; }
};

// What one request's constraint is built from. `tools` is the OpenAI-shaped list the prompt
// shows ([{type, function: {name, parameters}}], null when none); the param strings name the
// request fields that a compile error points at.
struct OutputRules {
  ResponseFormat format;
  ToolChoice tool_choice;
  const json::Value* tools = nullptr;
  std::size_t max_calls = constrain::any_number_of_calls;
  bool thinking = false;      // Qwen3 thinking on: a free <think> block may come first
  ToolCallFormat tool_format = ToolCallFormat::json;  // how forced calls are written: the template's format
  std::string schema_param = "response_format.json_schema.schema";  // or "grammar" for a GBNF
  std::string tool_schema_param = "function.parameters";  // after "tools[i]."
};

// Makes constraints for one engine. The two token tries (tool tags as added tokens, and as text
// for tool-call grammars) are built on first use, ~0.1 s each, and shared by every request.
class ConstraintFactory {
 public:
  explicit ConstraintFactory(const Engine& engine) : engine_(engine) {}

  // One constraint for each of `n` generations (choices) of the request, the grammar compiled
  // once; none when the answer is free: text format and no forced call. Throws ApiError (400)
  // naming the field whose schema or grammar cannot be compiled.
  std::vector<std::shared_ptr<constrain::Constraint>> make(const OutputRules& rules, std::size_t n = 1) const {
    const bool formatted = rules.format.type != ResponseFormat::Type::text;
    if (!formatted && !rules.tool_choice.forces_call()) return {};
    check_cost(rules);
    const bool calls = makes_calls(rules);
    constrain::ConstraintOptions options;
    options.thinking = rules.thinking ? constrain::ThinkingPolicy::allow : constrain::ThinkingPolicy::none;
    // With a format, calls stay possible (tool_choice auto) as the grammar's other branch.
    constrain::Grammar g = calls ? call_grammar(rules) : answer_grammar(rules);
    if (calls && formatted && !rules.tool_choice.forces_call()) g = constrain::either(g, answer_grammar(rules));
    const auto trie = calls ? tool_trie() : text_trie();
    std::vector<std::shared_ptr<constrain::Constraint>> out;
    // Built and warmed here, on the request's thread: the inference thread that decodes the other
    // slots only looks the first mask up (Constraint::warm).
    for (std::size_t i = 0; i < n; ++i) {
      out.push_back(std::make_shared<constrain::Constraint>(g, trie, options));
      out.back()->warm();
    }
    return out;
  }

  // Every schema make() would compile, measured on its JSON (SchemaCost) before any is, and before
  // the prompt is rendered: one past the limits is a 400 naming its field; several within them but
  // not together, naming "tools". A request that compiles nothing passes.
  static void check_cost(const OutputRules& rules) {
    const bool json = rules.format.type != ResponseFormat::Type::text;
    if (!json && !rules.tool_choice.forces_call()) return;
    std::vector<std::pair<const json::Value*, std::string>> schemas;  // (schema, its field)
    if (rules.format.type == ResponseFormat::Type::json_schema && !rules.format.schema.is_null())
      schemas.push_back({&rules.format.schema, rules.schema_param});
    if (makes_calls(rules))
      for (const auto& t : offered_tools(rules))
        if (t.schema != nullptr) schemas.push_back({t.schema, t.param});
    constrain::SchemaCost total;
    const constrain::GrammarLimits limits;
    std::string param;
    try {
      for (const auto& [schema, field] : schemas) {
        param = field;
        constrain::SchemaCost one;
        constrain::add_schema_cost(*schema, one);
        constrain::check_schema_cost(one, limits);
        constrain::add_schema_cost(*schema, total);
      }
      param = "tools";
      constrain::check_schema_cost(total, limits);
    } catch (const Error& e) {
      const std::string together = param == "tools" ? " (all schemas of the request together)" : "";
      throw invalid(param, "'" + param + "' cannot be enforced: " + client_text(e) + together);
    }
  }

 private:
  static constrain::Grammar answer_grammar(const OutputRules& rules) {
    if (rules.format.type == ResponseFormat::Type::json_object) return constrain::json_object_grammar();
    if (rules.format.type == ResponseFormat::Type::gbnf) {
      try {
        return constrain::parse_gbnf(rules.format.gbnf);
      } catch (const Error& e) {
        throw invalid(rules.schema_param, "'" + rules.schema_param + "' cannot be enforced: " + client_text(e));
      }
    }
    if (rules.format.schema.is_null()) return constrain::json_value_grammar();
    return compile(rules.format.schema, rules.schema_param);
  }

  // A call is forced, or possible beside a JSON format (tool_choice auto with tools).
  static bool makes_calls(const OutputRules& rules) {
    const bool have_tools = rules.tools != nullptr && rules.tools->is_array() && rules.tools->size() > 0 &&
                            rules.tool_choice.mode != ToolChoiceMode::none;
    return rules.tool_choice.forces_call() || (rules.format.type != ResponseFormat::Type::text && have_tools);
  }

  // The tools a call may name, with their parameters schema (null: any object) and its field name.
  struct OfferedTool {
    std::string name;
    const json::Value* schema;
    std::string param;
  };
  static std::vector<OfferedTool> offered_tools(const OutputRules& rules) {
    std::vector<OfferedTool> out;
    for (std::size_t i = 0; i < rules.tools->size(); ++i) {
      const json::Value& fn = *rules.tools->as_array()[i].find("function");
      const std::string& name = fn.find("name")->as_string();
      if (rules.tool_choice.mode == ToolChoiceMode::named && name != rules.tool_choice.name) continue;
      const json::Value* params = fn.find("parameters");
      // No schema, or an empty one, takes any JSON object, as the template shows it to the model.
      const bool open = params == nullptr || params->is_null() || (params->is_object() && params->size() == 0);
      out.push_back({name, open ? nullptr : params, "tools[" + std::to_string(i) + "]." + rules.tool_schema_param});
    }
    return out;
  }

  static constrain::Grammar call_grammar(const OutputRules& rules) {
    if (rules.tool_format == ToolCallFormat::xml) return xml_call_grammar(rules);
    std::vector<constrain::ToolGrammar> tools;
    for (const auto& t : offered_tools(rules))
      tools.push_back({t.name, t.schema == nullptr ? constrain::json_object_grammar() : compile(*t.schema, t.param)});
    return constrain::tool_calls_grammar(tools, {.min = 1, .max = rules.max_calls});
  }

  // The XML form (Qwen3.5, Qwen3-Coder): each tool's parameters compiled apart, so an error names it.
  static constrain::Grammar xml_call_grammar(const OutputRules& rules) {
    std::vector<constrain::XmlToolGrammar> tools;
    for (const auto& t : offered_tools(rules)) {
      try {
        tools.push_back(constrain::xml_tool_grammar(t.name, t.schema));
      } catch (const Error& e) {
        throw invalid(t.param, "'" + t.param + "' cannot be enforced: " + client_text(e));
      }
    }
    return constrain::xml_tool_calls_grammar(tools, {.min = 1, .max = rules.max_calls});
  }

  static constrain::Grammar compile(const json::Value& schema, const std::string& param) {
    try {
      return constrain::json_schema_grammar(schema);
    } catch (const Error& e) {
      throw invalid(param, "'" + param + "' cannot be enforced: " + client_text(e));
    }
  }

  std::shared_ptr<const constrain::TokenTrie> text_trie() const {
    std::call_once(text_once_, [&] { text_ = build({}); });
    return text_;
  }
  std::shared_ptr<const constrain::TokenTrie> tool_trie() const {
    std::call_once(tool_once_, [&] {
      std::vector<int> tags;
      for (const char* tag : {"<tool_call>", "</tool_call>"})
        if (auto id = engine_.tokenizer().token_to_id(tag)) tags.push_back(*id);
      tool_ = build(tags);
    });
    return tool_;
  }
  std::shared_ptr<const constrain::TokenTrie> build(const std::vector<int>& added_as_text) const {
    return std::make_shared<const constrain::TokenTrie>(constrain::TokenTrie::build(
        engine_.tokenizer(), engine_.eos_ids(), static_cast<std::size_t>(engine_.model().vocab_size()), added_as_text));
  }

  const Engine& engine_;
  mutable std::once_flag text_once_, tool_once_;
  mutable std::shared_ptr<const constrain::TokenTrie> text_, tool_;
};

}  // namespace kylin::server
