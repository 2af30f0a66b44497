// Scheduler: the bounded request queue in front of the model, with continuous batching. HTTP
// threads submit requests (a job per choice) concurrently; one inference thread admits jobs into
// free slots (KV caches, each a Session; a job takes the free slot whose cache shares the longest
// prefix with its prompt, least recently used on ties) and advances every running generation
// together: each step is one batched forward over one token of each decoding slot and a prompt
// chunk of each prefilling one, within a token budget, so a long prompt does not stall the others.
// With speculative decoding, the draft forwards of all slots (a draft model's or the MTP head's) run batched before each step
// and each slot's drafts are rows of that step's one verification pass.
// The choices of one request (n > 1) are sibling jobs on one prompt: the first prefills it, the
// others start from a copy of its KV prefix. Every choice takes a place (a free slot or one of
// max_queued), and a free slot goes to the waiting request with the fewest choices running (the
// oldest on a tie), so one request of many choices shares the slots instead of holding them all.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "kylin/constrain/constraint.hpp"
#include "kylin/generate/session.hpp"
#include "kylin/server/api_error.hpp"

namespace kylin::server {

struct Job;

// One slot's share of a step: `tokens` rows of `job` in slot `slot`, prompt chunk or decode token.
struct StepRow {
  const Job* job;
  int slot;
  std::int64_t tokens;
  bool prefill;
};

struct SchedulerOptions {
  int slots = 1;                  // KV caches, each a Session: the generations that run at once
  std::size_t max_queued = 16;    // jobs (choices) waiting beyond the running ones; more are refused
  std::optional<std::int64_t> context_length;  // per slot; default: the engine's
  // Disk cache of prompt prefixes (--cache-dir) or null: a job loads its longest stored prefix,
  // and its prompt's KV is queued for writing after on_done, off the request's path.
  PromptCache* prompt_cache = nullptr;
  // A prompt is fed in chunks of this many tokens whatever runs beside it, so a request's numbers
  // do not depend on its neighbours; a step adds prompt chunks while it has at most step_tokens
  // rows (and always one, so prefills progress).
  std::int64_t prefill_chunk = 256;
  std::int64_t step_tokens = 512;
  // Told each step's rows on the inference thread before its forward (tests script the scheduler
  // with it; tracing could): one StepRow per slot in the step, decode rows first.
  std::function<void(std::span<const StepRow>)> on_step = nullptr;
  // Speculative decoding (--model-draft, --lookup) for every job that does not opt out; the draft
  // engine, if any, must outlive the scheduler.
  SpeculativeOptions speculative;
};

// One generation. `on_piece` runs on the inference thread; returning false (or setting
// `cancelled`) stops the generation. `on_done` runs exactly once, with the result or the error.
struct Job {
  std::vector<int> prompt;
  std::shared_ptr<const ImagePrompt> images;  // the prompt's images, which options.images point into (null: none)
  Channel start = Channel::answer;
  GenerateOptions options;
  bool speculative = true;  // false: decode without the scheduler's speculative options (a request's `speculative: false`)
  std::shared_ptr<constrain::Constraint> constraint;  // owns options.constraint (null: a free answer)
  std::function<bool(const Piece&)> on_piece;
  std::function<void(Generation&&, std::optional<Failure>)> on_done;
  std::atomic<bool> cancelled{false};
  // Another choice of the same request, on the same prompt: this job starts once that job's
  // prompt is in its slot's cache, and copies it from there instead of prefilling it again.
  std::weak_ptr<const Job> prompt_leader;
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
  Scheduler(Engine& engine, const SchedulerOptions& o)
      : engine_(engine), slots_(static_cast<std::size_t>(std::max(1, o.slots))), max_queued_(o.max_queued),
        prompt_cache_(o.prompt_cache), prefill_chunk_(std::max<std::int64_t>(1, o.prefill_chunk)),
        step_tokens_(std::max<std::int64_t>(1, o.step_tokens)), speculative_(o.speculative), on_step_(o.on_step) {
    speculative_.validate();
    if (speculative_.draft) check_draft(engine, *speculative_.draft);
    if (speculative_.mtp && !engine.model().has_mtp())
      throw Error(ErrorCategory::config, engine.dir().string(), "--mtp: the model was loaded without its MTP head");
    for (auto& s : slots_) s.session = std::make_unique<Session>(engine, o.context_length);
    batch_.reserve(slots_.size());
    stepping_.reserve(slots_.size());
    worker_ = std::thread([this] { run(); });
  }
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  ~Scheduler() { shutdown(); }

  // False when the queue is full or the scheduler is shutting down: the caller answers 503.
  bool submit(std::shared_ptr<Job> job) { return submit(std::vector<std::shared_ptr<Job>>{std::move(job)}); }
  // The jobs of one request (its choices) queue together, all or none, as one request: each needs
  // a place, a slot that no job queued before it will take or one of max_queued. A request of more
  // than max_choices() jobs never fits (the caller answers 400 before compiling or queueing).
  bool submit(const std::vector<std::shared_ptr<Job>>& jobs) {
    {
      std::lock_guard lock(mutex_);
      const auto running = static_cast<std::size_t>(active_.load());  // counted under mutex_ as jobs start
      const std::size_t free_slots = slots_.size() - std::min(running, slots_.size());
      if (stopping_ || queue_.size() + jobs.size() > max_queued_ + free_slots) return false;
      const std::uint64_t request = ++requests_;
      for (const auto& j : jobs) queue_.push_back({j, request});
    }
    wake_.notify_one();
    return true;
  }
  // The most jobs one request can have: every slot and every place in the queue.
  std::size_t max_choices() const { return slots_.size() + max_queued_; }
  std::size_t max_queued() const { return max_queued_; }

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
  // Generations running now (at most slots()).
  int active() const { return active_.load(); }
  // Queued jobs already cancelled (their client left): still in queued() until skipped.
  std::size_t queued_cancelled() const {
    std::lock_guard lock(mutex_);
    return static_cast<std::size_t>(std::count_if(queue_.begin(), queue_.end(), [](const Queued& q) { return q.job->cancelled.load(); }));
  }
  // Since start: jobs skipped because they were cancelled before they ran, and tokens generated.
  // Both are updated before the job's on_done, so a client that has its answer sees them.
  std::uint64_t skipped() const { return skipped_.load(); }
  std::uint64_t generated_tokens() const { return generated_tokens_.load(); }
  // Since start: batched forwards of the model (each over every running slot's input) and of the
  // draft model (speculative decoding).
  std::uint64_t passes() const { return passes_.load(); }
  std::uint64_t draft_passes() const { return draft_passes_.load(); }
  int slots() const { return static_cast<int>(slots_.size()); }
  // Tokens held in all slots' KV caches, as of the last step.
  std::int64_t kv_tokens() const { return kv_tokens_.load(); }
  std::int64_t context_length() const { return slots_.front().session->cache().capacity(); }

 private:
  struct Slot {
    std::unique_ptr<Session> session;
    std::uint64_t last_used = 0;   // admission order of its latest job
    std::shared_ptr<Job> job;      // the generation running here, or null
    std::uint64_t request = 0;     // the submit() it came in
    std::optional<GenerationRun> run;
    std::optional<Failure> error;  // the run failed; it ends this step
  };

  // A queued job and the request (the submit() call) it came in; a request's jobs stay adjacent.
  struct Queued {
    std::shared_ptr<Job> job;
    std::uint64_t request;
  };

  bool free(const Slot& s) const { return s.job == nullptr; }
  // Slot and engine tasks run alone, between generations; a cancelled engine task is only skipped.
  static bool alone(const Job& j) { return j.slot_task || (j.engine_task && !j.cancelled.load()); }

  Slot& pick_free_slot(std::span<const int> prompt) {
    Slot* best = nullptr;
    std::int64_t best_prefix = -1;
    for (auto& s : slots_) {
      if (!free(s)) continue;
      const std::int64_t p = s.session->cache().reusable_prefix(prompt);
      if (p > best_prefix || (p == best_prefix && s.last_used < best->last_used)) best = &s, best_prefix = p;
    }
    best->last_used = ++clock_;
    return *best;
  }

  void run() {
    while (admit()) {
      step();
      busy_ = active_ > 0;
      std::int64_t kv = 0;
      for (const auto& s : slots_) kv += s.session->cache().size();
      kv_tokens_ = kv;
    }
  }

  // Takes queued jobs while they can start (next_job). Blocks only when nothing runs. False once
  // stopping with nothing queued or running.
  bool admit() {
    while (true) {
      Queued next;
      bool generation = false;
      {
        std::unique_lock lock(mutex_);
        if (active_ == 0) {
          busy_ = false;  // the tasks start() ran are over: nothing runs (run() resets it after steps)
          wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        }
        if (queue_.empty()) return active_ > 0;
        const std::optional<std::size_t> at = next_job();
        if (!at) return true;
        next = std::move(queue_[*at]);
        queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(*at));
        busy_ = true;
        generation = !alone(*next.job) && !next.job->cancelled.load();
        if (generation) ++active_;  // its slot is taken from now on (submit() counts it)
      }
      start(next.job, next.request, generation);
    }
  }

  // The queued job to start now, if one can (under mutex_). Tasks keep their place: one at the head
  // runs once no generation does, and the jobs behind it wait for it. Before the first task, a
  // cancelled job is skipped at once; otherwise, while a slot is free, the first job of the request
  // with the fewest choices running starts (the oldest request on a tie), unless its prompt is
  // still being prefilled by its leader.
  std::optional<std::size_t> next_job() {
    if (alone(*queue_.front().job)) return active_ == 0 ? std::optional<std::size_t>(0) : std::nullopt;
    std::optional<std::size_t> best;
    int best_running = 0;
    for (std::size_t i = 0; i < queue_.size() && !alone(*queue_[i].job); ++i) {
      const Queued& q = queue_[i];
      if (q.job->cancelled.load()) return i;
      const bool first_of_request = i == 0 || queue_[i - 1].request != q.request;
      if (active_ == slots() || !first_of_request || (best && best_running == 0) || leader_prefilling(*q.job)) continue;
      const int running = running_of(q.request);
      if (!best || running < best_running) best = i, best_running = running;
    }
    return best;
  }

  int running_of(std::uint64_t request) const {
    return static_cast<int>(std::count_if(slots_.begin(), slots_.end(), [&](const Slot& s) { return s.job && s.request == request; }));
  }

  // The slot running `job`, or null.
  Slot* slot_of(const Job* job) {
    for (auto& s : slots_)
      if (s.job.get() == job) return &s;
    return nullptr;
  }

  // A sibling choice waits while its leader's prompt is still being prefilled (the leader, queued
  // ahead of it, has started by then).
  bool leader_prefilling(const Job& job) {
    const auto leader = job.prompt_leader.lock();
    const Slot* s = leader ? slot_of(leader.get()) : nullptr;
    return s != nullptr && s->run && s->run->prefilling();
  }

  // Starts `slot` from the leader's cached prompt when that holds more of it than the slot does.
  void copy_leader_prefix(const Job& job, Slot& slot) {
    const auto leader = job.prompt_leader.lock();
    const Slot* from = leader ? slot_of(leader.get()) : nullptr;
    if (from == nullptr || from == &slot) return;
    const std::int64_t n = from->session->cache().reusable_prefix(job.prompt);
    if (n > slot.session->cache().reusable_prefix(job.prompt)) slot.session->copy_prefix(*from->session, n);
  }

  // Runs a task or a skip to its end now; starts a generation in a free slot (counted in active_).
  void start(const std::shared_ptr<Job>& job, std::uint64_t request, bool generation) {
    if (!generation) return execute(*job);
    Slot& slot = pick_free_slot(job->prompt);
    copy_leader_prefix(*job, slot);
    GenerateOptions o = job->options;
    o.on_piece = [j = job.get()](const Piece& p) { return !j->cancelled.load() && (!j->on_piece || j->on_piece(p)); };
    o.prompt_cache = prompt_cache_;
    o.store_prompt = false;  // in finish(), once the answer is out
    if (job->speculative) o.speculative = speculative_;
    try {
      slot.run.emplace(*slot.session, job->prompt, std::move(o), job->start, prefill_chunk_);
    } catch (...) {
      --active_;
      job->on_done(Generation{}, current_failure());
      return;
    }
    slot.job = job;
    slot.request = request;
  }

  void execute(Job& job) {
    Generation g;
    std::optional<Failure> error;
    try {
      if (job.slot_task) job.slot_task(*slots_.at(static_cast<std::size_t>(job.slot)).session);
      else if (job.cancelled.load()) g.stop_reason = StopReason::cancelled, ++skipped_;
      else job.engine_task();
    } catch (...) {
      error = current_failure();
    }
    job.on_done(std::move(g), std::move(error));
  }

  // One batched forward: a token of every decoding slot, then prompt chunks of the prefilling
  // ones, oldest first, while the step has rows to spare; then every finished run ends.
  void step() {
    draft();
    batch_.clear();
    stepping_.clear();
    std::int64_t rows = 0;
    for (auto& s : slots_)
      if (s.run && !s.error && !s.run->done() && !s.run->prefilling()) add(s, rows);
    bool chunk = false;
    for (Slot* s = oldest_prefill(0); s != nullptr; s = oldest_prefill(s->last_used)) {
      const auto n = static_cast<std::int64_t>(s->run->input().tokens.size());
      if (chunk && rows + n > step_tokens_) break;
      chunk |= add(*s, rows);
    }
    if (!batch_.empty()) {
      ++passes_;
      if (on_step_) tell_step();
      try {
        engine_.model().forward(batch_);
      } catch (...) {
        for (Slot* s : stepping_) s->error = current_failure();
      }
      for (Slot* s : stepping_) {
        if (s->error) continue;
        try {
          s->run->advance();
        } catch (...) {
          s->error = current_failure();
        }
      }
    }
    for (auto& s : slots_)
      if (s.run && (s.error || s.run->done())) finish(s);
  }

  // The draft forwards (a draft model's or the MTP head's) before a step: every slot with one due adds it to one batched
  // forward, until no slot drafts (each draft token is one round; a slot that stops drafting,
  // or whose client left, drops out).
  void draft() {
    while (true) {
      batch_.clear();
      stepping_.clear();
      for (auto& s : slots_) {
        if (!s.run || s.error || !s.run->drafting()) continue;
        if (s.job->cancelled.load()) {
          s.run->cancel();
          continue;
        }
        batch_.push_back(s.run->draft_input());
        stepping_.push_back(&s);
      }
      if (batch_.empty()) return;
      ++draft_passes_;
      try {
        stepping_.front()->run->forward_drafts(batch_);  // every slot's: the same draft (model or MTP head)
      } catch (...) {
        for (Slot* s : stepping_) s->error = current_failure(), s->run->cancel();
        continue;
      }
      for (Slot* s : stepping_) {
        try {
          s->run->advance_draft();
        } catch (...) {
          s->error = current_failure();
          s->run->cancel();
        }
      }
    }
  }

  // Adds the slot's next input to the step, unless its client left (then it ends as cancelled).
  bool add(Slot& s, std::int64_t& rows) {
    if (s.job->cancelled.load()) {
      s.run->cancel();
      return false;
    }
    batch_.push_back(s.run->input());
    stepping_.push_back(&s);
    rows += static_cast<std::int64_t>(batch_.back().tokens.size());
    return true;
  }

  void tell_step() {
    rows_.clear();
    for (std::size_t i = 0; i < stepping_.size(); ++i)
      rows_.push_back({stepping_[i]->job.get(), static_cast<int>(stepping_[i] - slots_.data()),
                       static_cast<std::int64_t>(batch_[i].tokens.size()), stepping_[i]->run->prefilling()});
    on_step_(rows_);
  }

  // The prefilling slot admitted first after admission number `after` (null: none).
  Slot* oldest_prefill(std::uint64_t after) {
    Slot* best = nullptr;
    for (auto& s : slots_)
      if (s.run && !s.run->done() && s.run->prefilling() && s.last_used > after && (!best || s.last_used < best->last_used)) best = &s;
    return best;
  }

  void finish(Slot& s) {
    Generation g;
    std::optional<Failure> error = std::move(s.error);
    if (!error) {
      try {
        g = s.run->finish();
      } catch (...) {
        error = current_failure();
      }
    }
    std::shared_ptr<Job> job = std::move(s.job);
    s.run.reset();
    s.error.reset();
    // Its constraint (grammar, DFA, masks: up to tens of MB) goes before the client is answered,
    // so memory the server returns to the system after a request (kylin-server) includes it.
    job->options.constraint = nullptr;
    job->constraint.reset();
    generated_tokens_ += static_cast<std::uint64_t>(g.tokens.size());
    --active_;
    const bool failed = error.has_value();
    job->on_done(std::move(g), std::move(error));
    if (prompt_cache_ && !failed) s.session->store_prompt(*prompt_cache_, job->prompt);
  }

  Engine& engine_;
  std::vector<Slot> slots_;
  std::uint64_t clock_ = 0;
  std::size_t max_queued_;
  PromptCache* prompt_cache_;
  std::int64_t prefill_chunk_, step_tokens_;
  SpeculativeOptions speculative_;
  std::vector<SequenceInput> batch_;  // [<= slots] this step's inputs
  std::vector<Slot*> stepping_;       // [<= slots] their slots
  std::function<void(std::span<const StepRow>)> on_step_;
  std::vector<StepRow> rows_;         // [<= slots] what on_step_ is told
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Queued> queue_;
  std::uint64_t requests_ = 0;  // submit() calls so far
  bool stopping_ = false;
  std::atomic<bool> busy_{false};
  std::atomic<int> active_{0};
  std::atomic<std::int64_t> kv_tokens_{0};
  std::atomic<std::uint64_t> skipped_{0}, generated_tokens_{0}, passes_{0}, draft_passes_{0};
  std::thread worker_;
};

}  // namespace kylin::server
