// The sampler's random numbers: xoshiro256** seeded through splitmix64, and our own
// 53-bit uniform double. Both are fully specified (no std::*_distribution, whose output is
// implementation-defined), so one seed gives one token sequence on every compiler and process.
#pragma once

#include <array>
#include <cstdint>

namespace kylin {

// splitmix64 (Steele, Lea, Flood 2014): expands one 64-bit seed into well-mixed state words.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}

  constexpr std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t state_;
};

// xoshiro256** 1.0 (Blackman, Vigna 2018), as in the authors' reference xoshiro256starstar.c.
class Xoshiro256StarStar {
 public:
  using State = std::array<std::uint64_t, 4>;

  // The recommended seeding: four splitmix64 outputs (never the all-zero state).
  explicit constexpr Xoshiro256StarStar(std::uint64_t seed) noexcept : s_{} {
    SplitMix64 sm(seed);
    for (auto& word : s_) word = sm.next();
  }
  // Raw state, for checking against published test vectors; must not be all zero.
  explicit constexpr Xoshiro256StarStar(const State& state) noexcept : s_(state) {}

  constexpr std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) on the 2^-53 grid: the top 53 bits as the mantissa of a double.
  constexpr double uniform() noexcept {
    constexpr double kTwoPowMinus53 = 1.0 / 9007199254740992.0;  // 2^-53
    return static_cast<double>(next() >> 11) * kTwoPowMinus53;
  }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept {
    return (x << k) | (x >> (64 - k));
  }

  State s_;
};

}  // namespace kylin
