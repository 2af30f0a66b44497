// ChannelRouter: sends generated text to the answer or to the <think> reasoning channel.
// It trims newlines at the edges of a reasoning block and right after </think> (as Qwen's own
// parsing does), filters stop strings out of the answer, and calls the streaming callback.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/generate/stop_strings.hpp"

namespace kylin {

enum class Channel { answer, reasoning };

// A piece of generated text; `text` is complete UTF-8.
struct Piece {
  std::string_view text;
  Channel channel;
};

class ChannelRouter {
 public:
  ChannelRouter(const std::function<bool(const Piece&)>& on_piece, std::vector<std::string> stop, std::string& answer,
                std::string& reasoning, Channel start)
      : on_piece_(on_piece), stop_(std::move(stop)), answer_(answer), reasoning_(reasoning), channel_(start),
        trim_leading_(start == Channel::reasoning) {}

  Channel channel() const { return channel_; }
  bool stopped_by_string() const { return stop_.stopped(); }

  // At <think> or </think>: the tag itself is not text.
  bool switch_to(Channel c) {
    held_newlines_.clear();  // newlines before </think> belong to neither channel
    channel_ = c;
    trim_leading_ = true;
    return true;
  }

  // Returns false when the callback asked to stop.
  bool text(std::string_view t) {
    if (channel_ == Channel::reasoning) return reasoning(t);
    return emit(stop_.push(trim(t)), Channel::answer);
  }

  bool finish() {
    if (channel_ == Channel::answer) return emit(stop_.flush(), Channel::answer);
    return true;
  }

 private:
  std::string trim(std::string_view t) {
    if (trim_leading_) {
      while (!t.empty() && t.front() == '\n') t.remove_prefix(1);
      if (!t.empty()) trim_leading_ = false;
    }
    return std::string(t);
  }

  bool reasoning(std::string_view t) {
    std::string s = trim(t);
    if (s.empty()) return true;
    const std::size_t body = s.find_last_not_of('\n');
    std::string out = held_newlines_;
    if (body == std::string::npos) {  // only newlines: hold them until more text follows
      held_newlines_ += s;
      return true;
    }
    out += s.substr(0, body + 1);
    held_newlines_ = s.substr(body + 1);
    return emit(out, Channel::reasoning);
  }

  bool emit(const std::string& text, Channel c) {
    if (text.empty()) return true;
    (c == Channel::answer ? answer_ : reasoning_) += text;
    return !on_piece_ || on_piece_(Piece{text, c});
  }

  const std::function<bool(const Piece&)>& on_piece_;
  StopStringFilter stop_;
  std::string& answer_;
  std::string& reasoning_;
  Channel channel_;
  bool trim_leading_;
  std::string held_newlines_;
};

}  // namespace kylin
