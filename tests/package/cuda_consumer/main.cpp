// Downstream CUDA check: a model on --backend cuda from an installed kylin. Usage: app MODEL_DIR;
// prints the argmax of the last token's logits, or kylin's error (no GPU: "no CUDA device").
#include <kylin/kylin.hpp>

#include <algorithm>
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: app MODEL_DIR\n");
    return 2;
  }
  try {
    kylin::Model model = kylin::Model::load(argv[1], {.backend = "cuda"});
    kylin::KVCache cache = model.new_cache(64);
    const std::vector<float> logits = model.logits_last(std::vector<int>{1, 2, 3}, cache);
    std::printf("%.*s argmax %td\n", static_cast<int>(model.backend_name().size()), model.backend_name().data(),
                std::max_element(logits.begin(), logits.end()) - logits.begin());
  } catch (const kylin::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
