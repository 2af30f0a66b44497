// io::load_embedding_info: what a sentence-transformers directory's modules.json, 1_Pooling and
// config_sentence_transformers.json say, and a named load error for each malformed or
// unsupported part; the bare (no "model." prefix) embedding checkpoint binds every tensor.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/temp_dir.hpp"
#include "kylin/io/sentence_transformers.hpp"
#include "kylin/model/weights.hpp"

namespace {

const std::string embedding_model = std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen3-embedding";

const std::string modules = R"([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
  {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
  {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])";

std::string pooling(const std::string& mode, const std::string& extra = "") {
  std::string s = R"({"word_embedding_dimension": 32)" + extra;
  for (const char* m : {"cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken"})
    s += std::string(", \"pooling_mode_") + m + "\": " + (mode == m ? "true" : "false");
  return s + "}";
}

// A directory with these three files ("" leaves a file out).
struct StDir {
  kylin::test::TempDir dir;
  StDir(const std::string& modules_json, const std::string& pooling_json, const std::string& prompts_json = "") {
    std::filesystem::create_directory(dir / "1_Pooling");
    if (!modules_json.empty()) std::ofstream(dir / "modules.json") << modules_json;
    if (!pooling_json.empty()) std::ofstream(dir.path() / "1_Pooling" / "config.json") << pooling_json;
    if (!prompts_json.empty()) std::ofstream(dir / "config_sentence_transformers.json") << prompts_json;
  }
};

std::string load_error(const StDir& d) {
  try {
    kylin::io::load_embedding_info(d.dir.path());
  } catch (const kylin::Error& e) {
    CHECK(e.category() == kylin::ErrorCategory::load);
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("sentence-transformers: the Qwen3-Embedding files give last-token pooling, 32 dims, normalise, query/document prompts") {
  const auto info = kylin::io::load_embedding_info(embedding_model);
  REQUIRE(info.has_value());
  CHECK(info->pooling == kylin::io::Pooling::last_token);
  CHECK(info->dimension == 32);
  CHECK(info->normalize);
  CHECK(info->prompt_names() == "query, document");
  CHECK(info->default_prompt_name.empty());
  CHECK(info->prompt("query")->starts_with("Instruct: "));
  CHECK_FALSE(kylin::io::load_embedding_info(std::string(KYLIN_TEST_DATA) + "/models/small-qwen3").has_value());
  CHECK(kylin::io::load_embedding_info(StDir(modules, pooling("mean_tokens")).dir.path())->pooling == kylin::io::Pooling::mean);
  CHECK(kylin::io::load_embedding_info(StDir(modules, pooling("cls_token"), R"({"prompts": {"q": "Q: "}, "default_prompt_name": "q"})").dir.path())
            ->default_prompt_name == "q");
}

TEST_CASE("sentence-transformers: malformed or unsupported files are load errors naming the file and the part") {
  CHECK(contains(load_error(StDir(modules, pooling("max_tokens"))), "pooling mode 'max_tokens' is not supported"));
  CHECK(contains(load_error(StDir(modules, pooling(""))), "exactly one pooling_mode_* must be true, 0 are"));
  CHECK(contains(load_error(StDir(modules, pooling("mean_tokens", R"(, "include_prompt": false)"))), "include_prompt: false"));
  CHECK(contains(load_error(StDir(modules, R"({"pooling_mode_lasttoken": true})")), "word_embedding_dimension"));
  CHECK(contains(load_error(StDir("{}", pooling("lasttoken"))), "modules.json: not a JSON array"));
  CHECK(contains(load_error(StDir(R"([{"path": "", "type": "sentence_transformers.models.Dense"}])", pooling("lasttoken"))),
                 "module type 'sentence_transformers.models.Dense' is not supported"));
  CHECK(contains(load_error(StDir(R"([{"path": "", "type": "sentence_transformers.models.Transformer"}])", pooling("lasttoken"))),
                 "no sentence_transformers.models.Pooling module"));
  CHECK(contains(load_error(StDir(R"([{"path": "../x", "type": "sentence_transformers.models.Pooling"}])", pooling("lasttoken"))),
                 "must be a subdirectory"));
  CHECK(contains(load_error(StDir(modules, pooling("lasttoken"), R"({"prompts": {"query": 1}})")), "prompt 'query' is not a string"));
  CHECK(contains(load_error(StDir(modules, pooling("lasttoken"), R"({"prompts": {}, "default_prompt_name": "query"})")),
                 "default_prompt_name is not one of the prompts (none)"));
  CHECK(contains(load_error(StDir(modules, pooling("lasttoken"), "[1")), "invalid JSON"));
}

TEST_CASE("weights: a checkpoint saved without the \"model.\" prefix binds every tensor under its HF name") {
  const kylin::io::Checkpoint ckpt(embedding_model);
  CHECK(ckpt.find("model.norm.weight") == nullptr);
  const auto check = kylin::check_weights(ckpt, kylin::load_model_config(embedding_model));
  CHECK(check.loads());
  CHECK(check.unexpected.empty());
}
