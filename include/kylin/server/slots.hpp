// Slot save, restore and erase (POST /slots/{id}?action=...), shaped like llama.cpp's server: a
// slot's KV state to or from a file in the --cache-dir directory, run on the inference thread
// between generations. File names are plain names; anything that could leave the directory is refused,
// and a restore reads only a regular file (never through a symlink, never a FIFO).
#pragma once

#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <string_view>

#include "kylin/generate/prompt_cache.hpp"
#include "kylin/server/api_error.hpp"
#include "kylin/server/request.hpp"
#include "kylin/server/scheduler.hpp"

namespace kylin::server {

namespace status {
inline constexpr int not_implemented = 501;
}

// A slot file name: 1 to 200 of [A-Za-z0-9._-], not starting with '.', and not one of the prompt
// cache's own names. So no '/', no "..", no NUL, nothing absolute: the file stays in the directory.
inline void check_slot_filename(std::string_view name) {
  auto refuse = [](const std::string& why) { throw invalid("filename", "the file name " + why); };
  if (name.empty() || name.size() > 200) refuse("must have 1 to 200 characters");
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
      refuse("may hold only letters, digits, '.', '_' and '-': a plain name inside the cache directory");
  if (name.front() == '.') refuse("must not start with '.'");
  if (PromptCache::is_entry_name(name) || name.find(".tmp.") != std::string_view::npos)
    refuse("has the form of the prompt cache's own files");
}

inline int parse_slot_id(std::string_view text, int slots) {
  int id = 0;
  const bool digits = !text.empty() && text.size() <= 4 && text.find_first_not_of("0123456789") == std::string_view::npos;
  if (digits) id = std::stoi(std::string(text));
  if (!digits || id >= slots)
    throw invalid("id_slot", "slot id '" + std::string(text) + "' is not one of 0.." + std::to_string(slots - 1));
  return id;
}

namespace detail {

// Saves slot `s` to `path`. A disk that cannot hold the file is 507 Insufficient Storage; other
// write failures are 500. The client reads the name it gave, never the cache directory's path.
inline std::size_t save_slot(const Session& s, const std::filesystem::path& path, const std::string& filename) {
  try {
    return s.save(path);
  } catch (const KVWriteError& e) {
    std::fprintf(stderr, "kylin-server: slot save: %s\n", e.what());
    const std::string why = "cannot save the slot to '" + filename + "': " + std::strerror(e.error_number());
    if (e.out_of_space()) throw ApiError(status::insufficient_storage, why, "filename", "insufficient_storage");
    throw ApiError(status::internal_error, why, "filename");
  }
}

// Restores slot `s` from `path`; a file that cannot be restored (missing, a symlink or FIFO,
// damaged, forged with NaN values, another model's) is a 400 naming it as the client did.
inline std::int64_t restore_slot(Session& s, const std::filesystem::path& path, const std::string& filename) {
  try {
    return s.load(path);
  } catch (const Error& e) {
    throw invalid("filename", "cannot restore the slot from '" + filename + "': " + e.message());
  }
}

}  // namespace detail

// Runs `action` ("save", "restore", "erase") on slot `id_text` and returns llama.cpp's answer:
// save {id_slot, filename, n_saved, n_written, timings: {save_ms}}, restore {id_slot, filename,
// n_restored, n_read, timings: {restore_ms}}, erase {id_slot, n_erased}. Without a cache
// directory: 501. A file that cannot be restored: 400; one the disk cannot hold: 507.
inline json::Value slot_action(Scheduler& scheduler, const PromptCache* cache, std::string_view id_text, std::string_view action,
                               std::string_view body_text) {
  if (cache == nullptr)
    throw ApiError(status::not_implemented, "slot save/restore/erase need a cache directory: start kylin-server with --cache-dir DIR",
                   {}, "not_supported");
  const int id = parse_slot_id(id_text, scheduler.slots());
  if (action != "save" && action != "restore" && action != "erase")
    throw invalid("action", "the action must be save, restore or erase (POST /slots/{id}?action=save)");
  std::string filename;
  if (action != "erase") {
    const json::Value body = detail::parse_body(body_text);
    const json::Value* f = detail::field(body, "filename");
    if (f == nullptr || !f->is_string()) throw invalid("filename", "'filename' must be a string");
    filename = f->as_string();
    check_slot_filename(filename);
  }
  const std::filesystem::path path = cache->dir() / filename;
  auto out = std::make_shared<json::Value>(json::Object{});
  auto job = std::make_shared<Job>();
  job->slot = id;
  job->slot_task = [out, path, filename, action = std::string(action), id](Session& s) {
    const auto t0 = std::chrono::steady_clock::now();
    auto ms = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
    json::Value timings = json::Object{};
    out->set("id_slot", id);
    if (action == "erase") {
      out->set("n_erased", s.cache().size());
      s.reset();
      return;
    }
    out->set("filename", filename);
    if (action == "save") {
      const std::size_t bytes = detail::save_slot(s, path, filename);
      out->set("n_saved", s.cache().size());
      out->set("n_written", static_cast<std::int64_t>(bytes));
      timings.set("save_ms", ms());
    } else {
      out->set("n_restored", detail::restore_slot(s, path, filename));
      std::error_code ec;  // the file may be evicted or replaced meanwhile
      out->set("n_read", static_cast<std::int64_t>(std::filesystem::file_size(path, ec)));
      timings.set("restore_ms", ms());
    }
    out->set("timings", std::move(timings));
  };
  auto done = std::make_shared<std::promise<std::optional<Failure>>>();
  auto result = done->get_future();
  job->on_done = [done](Generation&&, std::optional<Failure> error) { done->set_value(std::move(error)); };
  if (!scheduler.submit(job)) throw ApiError(status::unavailable, "the request queue is full; retry later", {}, "server_overloaded");
  if (auto f = result.get()) throw ApiError(f->status, std::move(f->message), std::move(f->param), std::move(f->code));
  return std::move(*out);
}

}  // namespace kylin::server
