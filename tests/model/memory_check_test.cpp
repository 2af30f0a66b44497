// The load-time memory check (model/memory_check.hpp): its count of the weight copies equals what
// loading then holds, and a count above the memory available is a load error naming what to change.
#include <doctest/doctest.h>

#include <string>
#include <unordered_set>

#include "kylin/model/model.hpp"

namespace memory_check_test {

const std::string data = KYLIN_TEST_DATA;

kylin::ModelWeights bound(const std::string& name) {
  const kylin::io::Checkpoint ckpt(data + "/models/" + name);
  return kylin::bind_weights(ckpt, kylin::load_model_config(data + "/models/" + name));
}

// Bytes of the distinct packed matrices `m` reads.
std::size_t packed_bytes(const kylin::Model& m) {
  kylin::ModelWeights w = m.weights();
  std::unordered_set<const void*> seen;
  std::size_t bytes = 0;
  kylin::for_each_matrix(w, [&](kylin::MatRef& x) {
    if (x.data && x.layout != kylin::kernels::Layout::rows && seen.insert(x.data).second) bytes += kylin::held_bytes(x);
  });
  return bytes;
}

TEST_CASE("the counted weight copies are those loading makes: quantized (q8, q4) and packed, tied and untied, dense, MoE, hybrid") {
  for (const char* name : {"small-qwen3", "tiny-qwen3-untied", "tiny-qwen3-moe", "tiny-qwen35", "tiny-qwen35-moe", "tiny-qwen3-next"}) {
    CAPTURE(name);
    const std::string dir = data + "/models/" + name;
    for (kylin::WeightFormat f : {kylin::WeightFormat::q8, kylin::WeightFormat::q4}) {
      kylin::Model m = kylin::Model::load(dir, {.threads = 2, .weights = f, .weight_layout = kylin::WeightLayout::stored});
      CHECK(kylin::weight_copy_bytes(bound(name), {.format = f, .packs = false}) == m.quantized().bytes());
    }
    kylin::Model packed = kylin::Model::load(dir, {.threads = 2});
    CHECK(kylin::weight_copy_bytes(bound(name), {.format = kylin::WeightFormat::stored, .packs = true}) == packed_bytes(packed));
  }
}

TEST_CASE("copies above the memory available are a load error naming the options that avoid them") {
  const kylin::HoldPlan q4_packed{.format = kylin::WeightFormat::q4, .packs = true};
  CHECK_NOTHROW(kylin::check_copies_fit(100, 100, q4_packed, true, "/m"));
  CHECK_NOTHROW(kylin::check_copies_fit(100, std::nullopt, q4_packed, true, "/m"));  // unknown: not refused
  try {
    kylin::check_copies_fit(std::size_t{30} << 30, std::size_t{12} << 30, q4_packed, true, "/models/big");
    FAIL("fits");
  } catch (const kylin::Error& e) {
    const std::string what = e.what();
    CHECK(what.find("[kylin.load]") != std::string::npos);
    CHECK(what.find("/models/big") != std::string::npos);
    CHECK(what.find("32.2 GB of weight copies (--weights q4, packed layout)") != std::string::npos);
    CHECK(what.find("12.9 GB of memory is available") != std::string::npos);
    CHECK(what.find("--experts mapped") != std::string::npos);
    CHECK(what.find("--weight-layout stored") != std::string::npos);
    CHECK(what.find("kylin quantize") != std::string::npos);
  }
  try {  // dense, packed only: neither experts nor quantizing to name
    kylin::check_copies_fit(std::size_t{30} << 30, std::size_t{12} << 30, {.format = kylin::WeightFormat::stored, .packs = true}, false, "/m");
    FAIL("fits");
  } catch (const kylin::Error& e) {
    const std::string what = e.what();
    CHECK(what.find("--experts") == std::string::npos);
    CHECK(what.find("kylin quantize") == std::string::npos);
    CHECK(what.find("--weight-layout stored reads the weights in place.") != std::string::npos);
  }
}

TEST_CASE("the memory available is read on Linux, within what /proc/meminfo gives") {
  const auto available = kylin::available_memory_bytes();
  REQUIRE(available.has_value());
  const auto mem = kylin::detail::read_number("/proc/meminfo", "MemTotal:"), swap = kylin::detail::read_number("/proc/meminfo", "SwapTotal:");
  REQUIRE(mem.has_value());
  CHECK(*available > 0);
  CHECK(*available <= (*mem + swap.value_or(0)) * 1024);
}

}  // namespace memory_check_test
