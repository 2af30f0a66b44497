// Test logit rows: n draws of a normal distribution (mean 0, `scale`) from a seeded generator.
#pragma once

#include <random>
#include <vector>

namespace kylin::test {

inline std::vector<float> normal_logits(std::size_t n, unsigned seed, float scale) {
  std::mt19937 gen(seed);  // test data only
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(n);
  for (float& l : logits) l = normal(gen);
  return logits;
}

}  // namespace kylin::test
