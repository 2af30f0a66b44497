// Downstream check of the kylin::eigen component: <kylin/eigen.hpp> compiles from the install and
// maps a checkpoint's norm weight in place. Usage: app MODEL_DIR; prints "eigen <rows>x<cols> <sum>".
#include <kylin/eigen.hpp>
#include <kylin/kylin.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: app MODEL_DIR\n");
    return 2;
  }
  try {
    const kylin::io::Checkpoint checkpoint(argv[1]);
    const auto* norm = checkpoint.find("model.norm.weight");
    if (!norm) throw kylin::Error(kylin::ErrorCategory::load, argv[1], "no model.norm.weight");
    const auto m = kylin::eigen::map<Eigen::bfloat16>(*norm);
    std::printf("eigen %ldx%ld %.6f\n", static_cast<long>(m.rows()), static_cast<long>(m.cols()), static_cast<double>(m.cast<float>().sum()));
  } catch (const kylin::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
