// Scheduler: the bounded request queue in front of the model. HTTP threads submit jobs
// concurrently; one inference thread runs them in arrival order. The Model has one workspace,
// so runs are serialized on it whatever the slot count: `slots` are KV caches (Sessions), and
// each job goes to the slot whose cache shares the longest prefix with its prompt (least
// recently used on ties), so several interleaved conversations all keep their prefix reuse.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "kylin/constrain/constraint.hpp"
#include "kylin/generate/session.hpp"

namespace kylin::server {

struct SchedulerOptions {
  int slots = 1;                  // KV caches, each a Session
  std::size_t max_queued = 16;    // jobs waiting beyond the one running; more are refused
  std::optional<std::int64_t> context_length;  // per slot; default: the engine's
  // Disk cache of prompt prefixes (--cache-dir) or null: a job loads its longest stored prefix,
  // and its prompt's KV is queued for writing after on_done, off the request's path.
  PromptCache* prompt_cache = nullptr;
};

// One generation. `on_piece` runs on the inference thread; returning false (or setting
// `cancelled`) stops the generation. `on_done` runs exactly once, with the result or the error.
struct Job {
  std::vector<int> prompt;
  Channel start = Channel::answer;
  GenerateOptions options;
  std::shared_ptr<constrain::Constraint> constraint;  // owns options.constraint (null: a free answer)
  std::function<bool(const Piece&)> on_piece;
  std::function<void(Generation&&, std::exception_ptr)> on_done;
  std::atomic<bool> cancelled{false};
  // Instead of a generation: work on slot `slot`'s Session between generations (slot save,
  // restore, erase); on_done gets an empty Generation and its error, if any.
  std::function<void(Session&)> slot_task;
  int slot = -1;
  // Instead of a generation: other work on the engine's model (embeddings, reranking), which is
  // not thread-safe, so it too runs here; on_done gets an empty Generation and its error, if any.
  // Skipped when the job was cancelled before it ran.
  std::function<void()> engine_task;
};

class Scheduler {
 public:
  Scheduler(Engine& engine, const SchedulerOptions& o) : max_queued_(o.max_queued), prompt_cache_(o.prompt_cache) {
    const int n = o.slots < 1 ? 1 : o.slots;
    for (int i = 0; i < n; ++i) slots_.push_back(Slot{std::make_unique<Session>(engine, o.context_length), 0});
    worker_ = std::thread([this] { run(); });
  }
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  ~Scheduler() { shutdown(); }

  // False when the queue is full or the scheduler is shutting down: the caller answers 503.
  bool submit(std::shared_ptr<Job> job) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_ || queue_.size() >= max_queued_) return false;
      queue_.push_back(std::move(job));
    }
    wake_.notify_one();
    return true;
  }

  // Runs everything already queued, then joins the inference thread.
  void shutdown() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  std::size_t queued() const {
    std::lock_guard lock(mutex_);
    return queue_.size();
  }
  bool busy() const { return busy_.load(); }
  // Queued jobs already cancelled (their client left): still in queued() until skipped.
  std::size_t queued_cancelled() const {
    std::lock_guard lock(mutex_);
    return static_cast<std::size_t>(std::count_if(queue_.begin(), queue_.end(), [](const auto& j) { return j->cancelled.load(); }));
  }
  // Since start: jobs skipped because they were cancelled before they ran, and tokens generated.
  // Both are updated before the job's on_done, so a client that has its answer sees them.
  std::uint64_t skipped() const { return skipped_.load(); }
  std::uint64_t generated_tokens() const { return generated_tokens_.load(); }
  int slots() const { return static_cast<int>(slots_.size()); }
  std::int64_t context_length() const { return slots_.front().session->cache().capacity(); }

 private:
  struct Slot {
    std::unique_ptr<Session> session;
    std::uint64_t last_used = 0;
  };

  Session& pick_slot(std::span<const int> prompt) {
    Slot* best = &slots_.front();
    std::int64_t best_prefix = -1;
    for (auto& s : slots_) {
      const std::int64_t p = s.session->cache().common_prefix(prompt);
      if (p > best_prefix || (p == best_prefix && s.last_used < best->last_used)) best = &s, best_prefix = p;
    }
    best->last_used = ++clock_;
    return *best->session;
  }

  void run() {
    while (true) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        job = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      execute(*job);
      busy_ = false;
    }
  }

  void execute(Job& job) {
    Generation g;
    std::exception_ptr error;
    Session* session = nullptr;
    if (job.slot_task) {
      try {
        job.slot_task(*slots_.at(static_cast<std::size_t>(job.slot)).session);
      } catch (...) {
        error = std::current_exception();
      }
    } else if (job.cancelled.load()) {
      g.stop_reason = StopReason::cancelled;
      ++skipped_;
    } else if (job.engine_task) {
      try {
        job.engine_task();
      } catch (...) {
        error = std::current_exception();
      }
    } else {
      try {
        GenerateOptions o = job.options;
        o.on_piece = [&job](const Piece& p) { return !job.cancelled.load() && (!job.on_piece || job.on_piece(p)); };
        o.prompt_cache = prompt_cache_;
        o.store_prompt = false;  // below, once the answer is out
        session = &pick_slot(job.prompt);
        g = session->generate(job.prompt, o, job.start);
      } catch (...) {
        error = std::current_exception();
      }
      generated_tokens_ += static_cast<std::uint64_t>(g.tokens.size());
    }
    job.on_done(std::move(g), error);
    if (prompt_cache_ && session && !error) session->store_prompt(*prompt_cache_, job.prompt);
  }

  std::vector<Slot> slots_;
  std::uint64_t clock_ = 0;
  std::size_t max_queued_;
  PromptCache* prompt_cache_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  std::atomic<bool> busy_{false};
  std::atomic<std::uint64_t> skipped_{0}, generated_tokens_{0};
  std::thread worker_;
};

}  // namespace kylin::server
