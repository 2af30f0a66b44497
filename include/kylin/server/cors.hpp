// Which browser origins may read kylin-server's answers (--cors-origin, repeatable and
// comma-separated): exact origins, "*" (any), or "localhost", llama.cpp's --cors-origins value for
// the dev servers of a local machine: any http(s) origin on localhost, 127.0.0.1 or [::1], any port.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kylin/core/error.hpp"

namespace kylin::server {

class CorsPolicy {
 public:
  CorsPolicy() = default;

  // Each value is "*", "localhost", or an origin as browsers send it: scheme://host[:port].
  explicit CorsPolicy(const std::vector<std::string>& values) {
    for (const std::string& value : values) {
      std::string_view rest = value;
      while (!rest.empty()) {
        const std::size_t comma = rest.find(',');
        add(trim(rest.substr(0, comma)));
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    }
  }

  bool enabled() const { return any_ || localhost_ || !origins_.empty(); }
  // Whether the answer depends on the request's Origin (then it says Vary: Origin).
  bool varies() const { return !any_ && enabled(); }

  // The Access-Control-Allow-Origin of an answer to a request from `origin` (its Origin header;
  // empty when it sent none): "*", the origin itself when allowed, else "" (no header).
  std::string allow_origin(std::string_view origin) const {
    if (any_) return "*";
    if (origin.empty()) return {};
    for (const std::string& o : origins_)
      if (o == origin) return o;
    return localhost_ && is_local(origin) ? std::string(origin) : std::string();
  }

  // http(s)://localhost, 127.0.0.1 or [::1], with or without a port.
  static bool is_local(std::string_view origin) {
    const std::size_t sep = origin.find("://");
    if (sep == std::string_view::npos) return false;
    const std::string_view scheme = origin.substr(0, sep);
    std::string_view host = origin.substr(sep + 3);
    if (scheme != "http" && scheme != "https") return false;
    const std::size_t colon = host.starts_with("[") ? host.find("]:") : host.find(':');
    if (colon != std::string_view::npos) {
      const std::string_view port = host.substr(colon + (host.starts_with("[") ? 2 : 1));
      if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) return false;
      host = host.substr(0, colon + (host.starts_with("[") ? 1 : 0));
    }
    return host == "localhost" || host == "127.0.0.1" || host == "[::1]";
  }

 private:
  static std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  }

  void add(std::string_view v) {
    if (v.empty()) return;
    if (v == "*") any_ = true;
    else if (v == "localhost") localhost_ = true;
    else if (const std::size_t sep = v.find("://"); sep == std::string_view::npos || sep == 0 || v.size() == sep + 3 ||
                                                    v.find('/', sep + 3) != std::string_view::npos)
      throw Error(ErrorCategory::config, "--cors-origin",
                  "'" + std::string(v) + "' is not an origin (scheme://host[:port], no path; or * or localhost)");
    else origins_.emplace_back(v);
  }

  bool any_ = false, localhost_ = false;
  std::vector<std::string> origins_;
};

}  // namespace kylin::server
