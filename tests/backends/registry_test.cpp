// Backends by name (backends/registry.hpp): a third backend that only the tests have, registered
// from this file alone and selected by name; unknown names and broken modules refused naming them.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <string>
#include <vector>

#include "common/process.hpp"
#include "common/reference.hpp"
#include "common/temp_dir.hpp"
#include "kylin/model/model.hpp"

namespace registry_test {

// The CPU backend, counting the matmul calls the model makes on it.
class CountingBackend : public kylin::CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  static constexpr std::string_view name = "cpu-counting";
  static inline std::atomic<long> matmuls{0};
  void matmul(const float* x, const kylin::kernels::MatRef& w, const float* bias, float* y, const kylin::kernels::RowPlan& plan) {
    ++matmuls;
    CpuBackend::matmul(x, w, bias, y, plan);
  }
};

std::unique_ptr<kylin::detail::AnyModel> load_counting(const std::filesystem::path& dir, const kylin::ModelOptions& o) {
  return std::make_unique<kylin::detail::ModelOn<CountingBackend>>(dir, o);
}
const kylin::BackendRegistration registration{{"cpu-counting", "the CPU, counting its matmul calls (tests only)", &load_counting}};

const std::string model_dir = kylin::test::data + "/models/small-qwen3";

TEST_CASE("a backend registered from its own file is listed after the CPU and runs the model when named") {
  const std::vector<std::string> names = kylin::backends().names();
  REQUIRE(!names.empty());
  CHECK(names.front() == "cpu");
  CHECK(std::find(names.begin(), names.end(), "cpu-counting") != names.end());
  CHECK(kylin::backends().describe().find("  cpu-counting  the CPU, counting its matmul calls (tests only)\n") != std::string::npos);

  kylin::Model cpu = kylin::Model::load(model_dir, {.threads = 2});
  kylin::Model counting = kylin::Model::load(model_dir, {.backend = "cpu-counting", .threads = 2});
  CHECK(cpu.backend_name() == "cpu");
  CHECK(counting.backend_name() == "cpu-counting");
  const std::vector<int> tokens{1, 5, 9, 2, 7};
  kylin::KVCache a = cpu.new_cache(), b = counting.new_cache();
  const long before = CountingBackend::matmuls.load();
  const auto expect = cpu.logits_last(tokens, a), got = counting.logits_last(tokens, b);
  CHECK(CountingBackend::matmuls.load() > before);
  CHECK(kylin::test::relative_l2(std::span<const float>(got), std::span<const float>(expect)) < 1e-6);
}

TEST_CASE("an unknown backend is an error naming it and the backends this program has") {
  CHECK_THROWS_WITH_AS(kylin::Model::load(model_dir, {.backend = "tpu"}),
                       doctest::Contains("no backend named 'tpu' in this program; it has: cpu, "), kylin::Error);
  CHECK(kylin::backends().check("cpu").empty());
  CHECK(kylin::backends().check("tpu").find("cpu-counting") != std::string::npos);
}

TEST_CASE("modules beside the program are listed by file name, and one that is not a module is refused when asked for") {
  kylin::test::TempDir dir;
  kylin::BackendRegistry registry({"cpu", "the CPU", nullptr});
  registry.set_module_dir(dir.path());
  std::ofstream(dir / "libkylin-backend-fake.so") << "not an ELF file";
  std::ofstream(dir / "libkylin-backend-.so") << "";           // no name: not a backend
  std::ofstream(dir / "libkylin-cpu-avx2.so") << "";           // a CPU kernel set, not a backend
  CHECK(registry.names() == std::vector<std::string>{"cpu", "fake"});
  CHECK_THROWS_WITH_AS(registry.factory("fake"), doctest::Contains("fake: cannot load"), kylin::Error);
  CHECK_THROWS_WITH_AS(registry.factory("absent"), doctest::Contains("no backend named 'absent' in this program; it has: cpu, fake"),
                       kylin::Error);
}

TEST_CASE("kylin's --backend takes and lists what the registry holds") {
  const auto help = kylin::test::run_shell(kylin::test::kylin_bin + " logits --help");
  CHECK(help.out.find("cpu  the CPU: kernels/ on a thread pool") != std::string::npos);
  const auto bad = kylin::test::run_shell(kylin::test::kylin_bin + " logits --model " + model_dir + " --tokens 1 --backend tpu 2>&1");
  CHECK(bad.exit_code != 0);
  CHECK(bad.out.find("no backend named 'tpu' in this program; it has: cpu") != std::string::npos);
}

}  // namespace registry_test
