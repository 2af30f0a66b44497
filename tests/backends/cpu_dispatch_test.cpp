// The portable build's CPU kernel sets (backends/cpu/dispatch.hpp): what CPUID reports against the
// kernel's /proc/cpuinfo flags, KYLIN_CPU's refusals, and every kernel-set module this CPU runs
// against the float64 reference logits; `kylin --version` names the set it runs.
#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/process.hpp"
#include "common/reference.hpp"
#include "common/temp_dir.hpp"
#include "kylin/backends/cpu/dispatch.hpp"
#include "kylin/model/model.hpp"

namespace cpu_dispatch_test {

std::set<std::string> cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::set<std::string> out;
      for (std::string w; words >> w;) out.insert(w);
      return out;
    }
  return {};
}

TEST_CASE("CPUID's features agree with the kernel's /proc/cpuinfo flags") {
  const auto flags = cpuinfo_flags();
  auto has = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (!flags.contains(n)) return false;
    return true;
  };
  const kylin::cpu::Features f = kylin::cpu::detect_features();
  CHECK(f.avx2_fma_f16c == has({"avx2", "fma", "f16c"}));
  CHECK(f.avx512 == (f.avx2_fma_f16c && has({"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"})));
  CHECK(f.avx512_vnni == (f.avx512 && has({"avx512_vnni"})));
  CHECK(f.avx_vnni == (f.avx2_fma_f16c && has({"avx_vnni"})));
}

TEST_CASE("KYLIN_CPU: an unknown set, a missing module and a file that is no module are errors naming them") {
  kylin::test::TempDir dir;
  CHECK_THROWS_WITH_AS(kylin::cpu::choose_kernel_set(dir.path(), "avx9000"), doctest::Contains("'avx9000' is not a kernel set; they are: "),
                       kylin::Error);
  CHECK_THROWS_WITH_AS(kylin::cpu::choose_kernel_set(dir.path(), "scalar"), doctest::Contains("libkylin-cpu-scalar.so"), kylin::Error);
  CHECK_THROWS_WITH_AS(kylin::cpu::choose_kernel_set(dir.path(), nullptr), doctest::Contains("no CPU kernel module for this CPU"),
                       kylin::Error);
  std::ofstream(dir / "libkylin-cpu-scalar.so") << "not an ELF file";
  CHECK_THROWS_WITH_AS(kylin::cpu::choose_kernel_set(dir.path(), "scalar"), doctest::Contains("cannot load"), kylin::Error);
}

#if defined(KYLIN_PORTABLE_BUILD)
// Relative L2 of the last position's logits against the reference, case by case.
double worst_error(const kylin::CpuKernelSet& k, const std::string& name) {
  const auto model = k.load(kylin::test::data + "/models/" + name, {.threads = 2});
  double worst = 0;
  for (const kylin::test::Case& c : kylin::test::load_cases(name)) {
    if (c.all_positions || !c.positions.empty()) continue;
    kylin::KVCache cache = model->new_cache(std::nullopt);
    std::vector<float> logits(static_cast<std::size_t>(model->config().vocab_size));
    const kylin::SequenceInput in{c.tokens, cache, {.logits = logits}};
    model->forward(std::span(&in, 1));
    worst = kylin::test::worse(worst, kylin::test::relative_l2(logits.data(), c.logits.back()));
  }
  return worst;
}

TEST_CASE("every kernel set this CPU runs loads from its module, names its instruction set and matches the float64 references") {
  const kylin::cpu::Features f = kylin::cpu::detect_features();
  int ran = 0;
  for (const kylin::cpu::KernelSetInfo& s : kylin::cpu::kernel_sets) {
    if (!s.runs_on(f)) continue;
    CAPTURE(s.name);
    const kylin::CpuKernelSet& k = kylin::cpu::choose_kernel_set(KYLIN_BIN_DIR, std::string(s.name).c_str());
    CHECK(k.name == s.name);
    const std::string simd(k.simd);
    if (s.name == "scalar") CHECK(simd == "scalar");
    if (s.name.starts_with("avx512")) CHECK(simd.starts_with("avx512"));
    if (s.name.starts_with("avx2")) CHECK(simd.find("avx2") != std::string::npos);
    CHECK(simd.ends_with("+vnni") == s.name.ends_with("-vnni"));
    for (const char* name : {"small-qwen3", "tiny-qwen3-moe", "small-qwen2-f32"}) {
      CAPTURE(name);
      CHECK(worst_error(k, name) < 1e-5);  // forward_test's f32 bar
    }
    CHECK(k.fma_peak_gflops(1) > 0);
    // the vdpbf16ps probe runs in the AVX-512 sets on a CPU with AVX512_BF16, and says 0 elsewhere
#if defined(__x86_64__)
    CHECK((k.bf16_dot_peak_gflops(1) > 0) == (s.name.starts_with("avx512") && __builtin_cpu_supports("avx512bf16")));
#endif
    ++ran;
  }
  CHECK(ran >= 1);  // scalar runs everywhere
}

TEST_CASE("kylin --version names the kernel set it runs: the best this CPU has, or the one KYLIN_CPU names") {
  const kylin::cpu::Features f = kylin::cpu::detect_features();
  std::string best;
  for (const kylin::cpu::KernelSetInfo& s : kylin::cpu::kernel_sets)
    if (best.empty() && s.runs_on(f)) best = s.name;
  const auto plain = kylin::test::run_shell("env -u KYLIN_CPU " + kylin::test::kylin_bin + " --version");
  CHECK(plain.exit_code == 0);
  CHECK(plain.out.find("cpu kernels: " + best + " (") != std::string::npos);
  const auto forced = kylin::test::run_shell("KYLIN_CPU=scalar " + kylin::test::kylin_bin + " --version");
  CHECK(forced.out.find("cpu kernels: scalar (scalar)") != std::string::npos);
  const auto bad = kylin::test::run_shell("KYLIN_CPU=avx9000 " + kylin::test::kylin_bin + " logits --model " + kylin::test::data +
                                          "/models/small-qwen3 --tokens 1,2 2>&1");
  CHECK(bad.exit_code == 1);
  CHECK(bad.out.find("KYLIN_CPU: 'avx9000' is not a kernel set") != std::string::npos);
}
#endif

}  // namespace cpu_dispatch_test
