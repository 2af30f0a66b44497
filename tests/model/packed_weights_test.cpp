// PackedWeights: what WeightLayout::packed makes of bound weights on the CPU backend. Every matrix a
// matmul reads is a panel copy holding the stored values exactly; the norms are owned copies; an
// untied embedding table stays in the file; a tied one is the LM head's panels; stored changes nothing.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/reference.hpp"
#include "kylin/model/model.hpp"

namespace packed_weights_test {

using kylin::MatRef;
using kylin::kernels::Layout;
const std::string data = KYLIN_TEST_DATA;

// Whether every element of `packed` (panels) equals the element of `stored` (row-major) at the same
// row and column, in the stored dtype's bits.
bool same_elements(const MatRef& stored, const MatRef& packed) {
  if (stored.dtype != packed.dtype || stored.rows != packed.rows || stored.cols != packed.cols) return false;
  return kylin::visit_dtype(stored.dtype, [&]<class T>(std::type_identity<T>) {
    const auto* s = static_cast<const T*>(stored.data);
    const kylin::kernels::PanelRef<T> p{static_cast<const T*>(packed.data), packed.rows, packed.cols};
    for (std::int64_t r = 0; r < stored.rows; ++r)
      for (std::int64_t c = 0; c < stored.cols; ++c)
        if (kylin::to_float(s[r * stored.cols + c]) != kylin::to_float(p.at(r, c))) return false;
    return true;
  });
}

// The matrices of `w` a matmul reads (all of for_each_matrix but the embedding table), in order.
std::vector<MatRef> matmul_weights(kylin::ModelWeights& w) {
  std::vector<MatRef> out;
  kylin::for_each_matrix(w, [&](MatRef& m) {
    if (&m != &w.embed_tokens && m.data) out.push_back(m);
  });
  return out;
}

// A test checkpoint's weights bound as loading binds them, and what `layout` makes of them on a
// CpuBackend.
struct Bound {
  kylin::io::Checkpoint ckpt;
  kylin::ModelConfig config;
  kylin::ModelWeights stored;
  kylin::CpuBackend backend;
  kylin::PackedWeights packer;
  kylin::ModelWeights result;
  Bound(const std::string& name, kylin::WeightLayout layout)
      : ckpt(data + "/models/" + name), config(kylin::load_model_config(data + "/models/" + name)), stored(kylin::bind_weights(ckpt, config)),
        backend(config, {.threads = 2}), result(packer.apply(stored, layout, backend, 2, ckpt)) {}
};

TEST_CASE("packed: every matmul weight is a panel copy of its stored values; norms are copied; the untied table stays, a tied one is the LM head") {
  for (const char* name : {"tiny-qwen3-untied", "small-qwen3", "tiny-qwen3-moe", "odd-qwen3-f16-sharded"}) {
    CAPTURE(name);
    Bound b(name, kylin::WeightLayout::packed);
    kylin::ModelWeights &stored = b.stored, &packed = b.result;
    const kylin::ModelConfig& config = b.config;
    const auto before = matmul_weights(stored), after = matmul_weights(packed);
    REQUIRE(before.size() == after.size());
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < before.size(); ++i) {
      CAPTURE(i);
      CHECK(before[i].layout == Layout::rows);
      CHECK(after[i].layout == Layout::panels);
      CHECK(after[i].data != before[i].data);
      CHECK(same_elements(before[i], after[i]));
      bytes += static_cast<std::size_t>(kylin::kernels::panel_elements(after[i].rows, after[i].cols)) * kylin::dtype_size(after[i].dtype);
    }
    CHECK(b.packer.bytes() == bytes);
    const bool tied = stored.embed_tokens.data == stored.lm_head.data;
    CHECK(tied == config.tie_word_embeddings);
    if (tied) {
      CHECK(packed.embed_tokens.data == packed.lm_head.data);
      CHECK(packed.embed_tokens.layout == Layout::panels);
    } else {
      CHECK(packed.embed_tokens.data == stored.embed_tokens.data);
      CHECK(packed.embed_tokens.layout == Layout::rows);
    }
    CHECK(packed.norm.layout == Layout::rows);
    CHECK(packed.norm.data != stored.norm.data);
    CHECK(std::equal(static_cast<const std::byte*>(packed.norm.data),
                     static_cast<const std::byte*>(packed.norm.data) + packed.norm.cols * kylin::dtype_size(packed.norm.dtype),
                     static_cast<const std::byte*>(stored.norm.data)));
  }
}

TEST_CASE("a tied table looked up in panels gives the stored row, every row") {
  Bound b("small-qwen3", kylin::WeightLayout::packed);
  REQUIRE(b.result.embed_tokens.layout == Layout::panels);
  std::vector<float> from_rows(static_cast<std::size_t>(b.config.hidden_size)), from_panels(from_rows.size());
  for (int id = 0; id < b.config.vocab_size; ++id) {
    b.backend.embed(b.stored.embed_tokens, std::span<const int>(&id, 1), from_rows.data());
    b.backend.embed(b.result.embed_tokens, std::span<const int>(&id, 1), from_panels.data());
    REQUIRE(from_rows == from_panels);
  }
}

TEST_CASE("stored leaves every weight where binding put it") {
  Bound b("tiny-qwen3-moe", kylin::WeightLayout::stored);
  kylin::ModelWeights &stored = b.stored, &same = b.result;
  const auto before = matmul_weights(stored), after = matmul_weights(same);
  REQUIRE(before.size() == after.size());
  for (std::size_t i = 0; i < before.size(); ++i) {
    CHECK(after[i].data == before[i].data);
    CHECK(after[i].layout == Layout::rows);
  }
  CHECK(same.norm.data == stored.norm.data);
  CHECK(b.packer.bytes() == 0);
}

// This process's resident memory in KiB (VmRSS).
long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with("VmRSS:")) return std::stol(line.substr(6));
  return -1;
}

TEST_CASE("only weights go to huge pages: a fresh 64k-position KV cache commits memory for the positions written, not whole 2 MiB pages") {
  kylin::Model model = kylin::Model::load(data + "/models/tiny-qwen3-untied", {.threads = 1});
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
  const int token = 3;
  auto warm = model.new_cache(64);
  model.forward(std::span<const int>(&token, 1), warm, logits);  // first touches of the workspace
  auto cache = model.new_cache(65536);
  REQUIRE(cache.bytes() >= (std::size_t{16} << 20));
  const long before = rss_kib();
  model.forward(std::span<const int>(&token, 1), cache, logits);  // position 0: a few 4 KiB pages per layer
  const long grown = rss_kib() - before;
  MESSAGE("RSS growth writing one position of a ", cache.bytes() >> 20, " MiB cache: ", grown, " KiB");
  CHECK(grown < 1024);
}

}  // namespace packed_weights_test
