// StopStringFilter: holds back generated text that might be the start of a stop string, so a
// stop string split across tokens is caught and never emitted.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace kylin {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops = {}) : stops_(std::move(stops)) {
    std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
  }

  // Appends `text`; returns what can be emitted now. Sets stopped() once a stop string appears:
  // the returned text then ends right before it and everything after is dropped.
  std::string push(std::string_view text) {
    if (stopped_) return {};
    held_ += text;
    std::size_t first = std::string::npos;
    for (const auto& s : stops_) first = std::min(first, held_.find(s));
    if (first != std::string::npos) {
      stopped_ = true;
      std::string out = held_.substr(0, first);
      held_.clear();
      return out;
    }
    const std::size_t keep = partial_match_length();
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
  }

  // End of generation: whatever was held back is real text after all.
  std::string flush() {
    std::string out;
    if (!stopped_) out.swap(held_);
    held_.clear();
    return out;
  }

  bool stopped() const { return stopped_; }

 private:
  // Longest suffix of held_ that is a proper prefix of some stop string.
  std::size_t partial_match_length() const {
    std::size_t best = 0;
    for (const auto& s : stops_)
      for (std::size_t k = std::min(s.size() - 1, held_.size()); k > best; --k)
        if (std::string_view(held_).substr(held_.size() - k) == std::string_view(s).substr(0, k)) {
          best = k;
          break;
        }
    return best;
  }

  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace kylin
