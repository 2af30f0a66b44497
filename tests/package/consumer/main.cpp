// Downstream check: the installed headers compile on their own and the library loads a model
// directory. Usage: app MODEL_DIR; prints "<model_type> <tensor count> <preset line>".
#include <kylin/kylin.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: app MODEL_DIR\n");
    return 2;
  }
  try {
    const kylin::ModelConfig config = kylin::load_model_config(argv[1]);
    const kylin::io::Checkpoint checkpoint(argv[1]);
    kylin::ThreadPool pool(2);
    std::int64_t elements = 0;
    for (const auto* t : checkpoint.tensors()) elements += t->numel();
    std::printf("%s %zu tensors %lld elements; %s\n", config.model_type.c_str(), checkpoint.tensors().size(),
                static_cast<long long>(elements), kylin::describe_preset_match(config).c_str());
  } catch (const kylin::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
