// The Responses API's stored responses (`store`: true, OpenAI's default): what GET
// /v1/responses/{id} returns and `previous_response_id` continues. Bounded in count and in bytes
// (the JSON of each response and of its conversation), the oldest evicted first; a response larger
// than the whole byte budget is not kept. Shared by the request threads.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "kylin/core/json.hpp"

namespace kylin::server {

struct ResponseStoreLimits {
  std::size_t max_responses = 1024;
  std::size_t max_bytes = std::size_t{64} << 20;
};

struct StoredResponse {
  json::Value response;  // the response object as it was answered
  json::Value messages;  // the conversation through its output, as chat messages (instructions left out)
};

class ResponseStore {
 public:
  explicit ResponseStore(ResponseStoreLimits limits = {}) : limits_(limits) {}

  // Keeps `r` under `id`, then evicts the oldest responses while the store is over a limit.
  void put(const std::string& id, StoredResponse r) {
    const std::size_t bytes = json::dump(r.response).size() + json::dump(r.messages).size();
    std::lock_guard lock(mutex_);
    erase_locked(id);
    if (bytes > limits_.max_bytes || limits_.max_responses == 0) return;
    order_.push_back({id, std::move(r), bytes});
    index_[id] = std::prev(order_.end());
    bytes_ += bytes;
    while (order_.size() > limits_.max_responses || bytes_ > limits_.max_bytes) erase_locked(std::string(order_.front().id));
  }

  std::optional<StoredResponse> get(const std::string& id) const {
    std::lock_guard lock(mutex_);
    const auto it = index_.find(id);
    if (it == index_.end()) return std::nullopt;
    return it->second->value;
  }

  bool erase(const std::string& id) {
    std::lock_guard lock(mutex_);
    return erase_locked(id);
  }

  // The output item `item_id` of a stored response (an input item_reference names one), newest
  // response first; a linear scan, the store being bounded.
  std::optional<json::Value> find_item(const std::string& item_id) const {
    std::lock_guard lock(mutex_);
    for (auto it = order_.rbegin(); it != order_.rend(); ++it)
      if (const json::Value* output = it->value.response.find("output"); output && output->is_array())
        for (const json::Value& item : output->as_array())
          if (const json::Value* id = item.find("id"); id && id->is_string() && id->as_string() == item_id) return item;
    return std::nullopt;
  }

  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return order_.size();
  }
  std::size_t bytes() const {
    std::lock_guard lock(mutex_);
    return bytes_;
  }

 private:
  struct Entry {
    std::string id;
    StoredResponse value;
    std::size_t bytes;
  };

  bool erase_locked(const std::string& id) {
    const auto it = index_.find(id);
    if (it == index_.end()) return false;
    bytes_ -= it->second->bytes;
    order_.erase(it->second);
    index_.erase(it);
    return true;
  }

  ResponseStoreLimits limits_;
  mutable std::mutex mutex_;
  std::list<Entry> order_;  // oldest first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  std::size_t bytes_ = 0;
};

}  // namespace kylin::server
