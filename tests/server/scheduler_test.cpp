// The scheduler, scripted: each round's jobs queue behind a gate (an engine task that holds the
// inference thread until the test releases it), so admission sees them all at once, and every
// step's rows are recorded through SchedulerOptions::on_step. The properties are about the order
// and content of steps (first come first served, the step's row budget, decode rows never held
// back by a long prefill, slot choice), never about time.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <vector>

#include "kylin/server/scheduler.hpp"

namespace scheduler_test {

using kylin::server::Job;
using kylin::server::StepRow;

kylin::Engine& engine() {
  static auto e = kylin::Engine::load(std::string(KYLIN_TEST_DATA) + "/models/e2e-qwen3-chat",
                                      {.threads = 1, .max_pass_rows = 512, .context_length = 1024});
  return *e;
}

// What the inference thread did: each step's rows, and the order jobs ended and gates opened in.
struct Log {
  std::mutex m;
  std::vector<std::vector<StepRow>> steps;
  std::vector<const Job*> events;  // jobs in the order their on_done ran (gates included)
  void step(std::span<const StepRow> rows) {
    std::lock_guard lock(m);
    steps.emplace_back(rows.begin(), rows.end());
  }
  // Steps that have a row of `job`, by index.
  std::vector<std::size_t> steps_of(const Job* job) {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < steps.size(); ++i)
      for (const StepRow& r : steps[i])
        if (r.job == job) out.push_back(i);
    return out;
  }
  int slot_of(const Job* job) {
    for (const auto& s : steps)
      for (const StepRow& r : s)
        if (r.job == job) return r.slot;
    return -1;
  }
};

// Consecutive ids from `first`: a prompt of the real vocabulary with no special tokens.
std::vector<int> ids(int first, int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

class Round {
 public:
  Round(kylin::server::Scheduler& s, Log& log) : scheduler_(s), log_(log) {
    auto gate = std::make_shared<Job>();
    gate->engine_task = [open = open_.get_future().share()] { open.wait(); };
    submit(gate);
  }
  // A greedy generation of exactly `tokens` tokens.
  std::shared_ptr<Job> generation(std::vector<int> prompt, int tokens) {
    auto j = make_generation(std::move(prompt), tokens);
    submit(j);
    return j;
  }
  static std::shared_ptr<Job> make_generation(std::vector<int> prompt, int tokens) {
    auto j = std::make_shared<Job>();
    j->prompt = std::move(prompt);
    j->options.sampling.greedy = true;
    j->options.ignore_eos = true;
    j->options.max_new_tokens = tokens;
    return j;
  }
  // Counts `j` among the round's jobs (run() waits for it) and logs its end.
  void watch(const std::shared_ptr<Job>& j) {
    auto done = std::make_shared<std::promise<void>>();
    done_.push_back(done->get_future());
    j->on_done = [this, raw = j.get(), done](kylin::Generation&&, std::optional<kylin::server::Failure> error) {
      CHECK_FALSE(error.has_value());
      {
        std::lock_guard lock(log_.m);
        log_.events.push_back(raw);
      }
      done->set_value();
    };
  }
  // One request of `k` choices (sibling jobs on one prompt, as the Service makes them), queued together.
  std::vector<std::shared_ptr<Job>> choices(const std::vector<int>& prompt, int tokens, int k) {
    std::vector<std::shared_ptr<Job>> jobs;
    for (int i = 0; i < k; ++i) {
      jobs.push_back(make_generation(prompt, tokens));
      if (i > 0) jobs.back()->prompt_leader = jobs.front();
    }
    for (const auto& j : jobs) watch(j);
    REQUIRE(scheduler_.submit(jobs));
    return jobs;
  }
  std::shared_ptr<Job> task(std::function<void()> f) {
    auto j = std::make_shared<Job>();
    j->engine_task = std::move(f);
    submit(j);
    return j;
  }
  // Opens the gate and waits for every job of the round (bounded only against a hang).
  void run() {
    open_.set_value();
    for (auto& f : done_) REQUIRE(f.wait_for(std::chrono::minutes(5)) == std::future_status::ready);
  }

 private:
  void submit(const std::shared_ptr<Job>& j) {
    watch(j);
    REQUIRE(scheduler_.submit(j));
  }

  kylin::server::Scheduler& scheduler_;
  Log& log_;
  std::promise<void> open_;
  std::vector<std::future<void>> done_;
};

kylin::server::SchedulerOptions options(int slots, Log& log, std::int64_t chunk = 256, std::int64_t budget = 512) {
  kylin::server::SchedulerOptions o;
  o.slots = slots;
  o.prefill_chunk = chunk;
  o.step_tokens = budget;
  o.on_step = [&log](std::span<const StepRow> rows) { log.step(rows); };
  return o;
}

}  // namespace scheduler_test

using namespace scheduler_test;

TEST_CASE("scheduler: jobs start in arrival order; a task waits for the generations before it and holds back those after") {
  Log log;
  kylin::server::Scheduler scheduler(engine(), options(2, log));
  Round round(scheduler, log);
  const auto a = round.generation(ids(1000, 5), 6), b = round.generation(ids(2000, 5), 2);
  const auto c = round.generation(ids(3000, 5), 3), d = round.generation(ids(4000, 5), 3);
  std::size_t steps_before_task = 0;
  const auto t = round.task([&] { steps_before_task = log.steps.size(); });
  const auto e = round.generation(ids(5000, 5), 2);
  round.run();
  scheduler.shutdown();
  const auto first = [&](const auto& j) { return log.steps_of(j.get()).front(); };
  const auto last = [&](const auto& j) { return log.steps_of(j.get()).back(); };
  // two slots: a and b start together, c takes b's slot when b ends, d takes the next free one
  CHECK(first(a) == 0);
  CHECK(first(b) == 0);
  CHECK(first(c) == last(b) + 1);
  CHECK(first(d) == std::min(last(a), last(c)) + 1);
  // the task runs after every generation admitted before it, alone, and e only after it
  CHECK(steps_before_task == std::max({last(a), last(c), last(d)}) + 1);
  CHECK(first(e) == steps_before_task);
  const std::vector<const Job*> ended = {b.get(), c.get(), a.get(), d.get(), t.get(), e.get()};
  CHECK(std::vector<const Job*>(log.events.begin() + 1, log.events.end()) == ended);  // after the gate
}

TEST_CASE("scheduler: a step holds every decoding slot, then prompt chunks oldest first within the row budget (one at least)") {
  const std::int64_t chunk = 16, budget = 40;
  Log log;
  kylin::server::Scheduler scheduler(engine(), options(4, log, chunk, budget));
  Round round(scheduler, log);
  std::vector<std::shared_ptr<Job>> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(round.generation(ids(1000 + 500 * i, 40 + 30 * i), 8));
  round.run();
  scheduler.shutdown();
  std::map<const Job*, std::int64_t> prefilled, decoded;
  for (const auto& step : log.steps) {
    std::int64_t decode = 0, rows = 0, first_chunk = 0;
    bool seen_prefill = false;
    const Job* previous = nullptr;
    for (const StepRow& r : step) {
      rows += r.tokens;
      if (!r.prefill) {
        CHECK_FALSE(seen_prefill);  // decode rows come first
        CHECK(r.tokens == 1);
        decode += 1;
        decoded[r.job] += 1;
        continue;
      }
      CHECK(r.tokens <= chunk);
      if (!seen_prefill) first_chunk = r.tokens;
      // oldest first: jobs were admitted in vector order
      if (previous) CHECK(std::find_if(jobs.begin(), jobs.end(), [&](auto& j) { return j.get() == previous; }) <
                          std::find_if(jobs.begin(), jobs.end(), [&](auto& j) { return j.get() == r.job; }));
      previous = r.job;
      seen_prefill = true;
      prefilled[r.job] += r.tokens;
    }
    CHECK(rows <= std::max(budget, decode + first_chunk));
  }
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    CAPTURE(i);
    CHECK(prefilled[jobs[i].get()] == 40 + 30 * static_cast<std::int64_t>(i));
    CHECK(decoded[jobs[i].get()] == 7);  // the first token comes from the last prompt chunk's logits
  }
}

TEST_CASE("scheduler: a long prompt's chunks never keep a decoding slot waiting: it decodes in every step until it ends") {
  const std::int64_t chunk = 16;
  Log log;
  kylin::server::Scheduler scheduler(engine(), options(2, log, chunk, 20));
  Round first(scheduler, log);
  const auto talker = first.generation(ids(1000, 4), 40);
  first.run();
  // the long prompt arrives while the talker decodes: admitted behind a second gate in its slot
  {
    std::lock_guard lock(log.m);
    log.steps.clear();
  }
  Round second(scheduler, log);
  const auto talker2 = second.generation(ids(1000, 4), 60);  // reuses the talker's prefix
  const auto reader = second.generation(ids(7000, 300), 2);
  second.run();
  scheduler.shutdown();
  const auto talking = log.steps_of(talker2.get()), reading = log.steps_of(reader.get());
  REQUIRE(talking.size() >= 2);
  // every step from the talker's first to its last has its row (no step skips it)
  CHECK(talking.back() - talking.front() + 1 == talking.size());
  // and the reader's prompt went in chunks of at most 16 beside it, ~19 steps of them
  std::int64_t chunks_beside = 0;
  for (std::size_t i = talking.front(); i <= talking.back(); ++i)
    for (const StepRow& r : log.steps[i])
      if (r.job == reader.get() && r.prefill) {
        CHECK(r.tokens <= chunk);
        ++chunks_beside;
      }
  CHECK(chunks_beside >= 300 / chunk);
  CHECK(reading.front() <= talking.front() + 1);
}

TEST_CASE("scheduler: a job takes the free slot with the longest cached prefix, the least recently used one on a tie") {
  Log log;
  kylin::server::Scheduler scheduler(engine(), options(2, log));
  std::vector<int> p = ids(1000, 30), q = ids(3000, 30);
  Round one(scheduler, log);
  const auto x = one.generation(p, 3), y = one.generation(q, 3);  // x: slot 0 (both empty), y: slot 1
  one.run();
  CHECK(log.slot_of(x.get()) == 0);
  CHECK(log.slot_of(y.get()) == 1);
  // z extends y's prompt: slot 1 though it is the most recently used; w takes what is left
  std::vector<int> q_more = q;
  q_more.push_back(4242);
  Round two(scheduler, log);
  const auto z = two.generation(q_more, 3), w = two.generation(ids(5000, 20), 3);
  two.run();
  CHECK(log.slot_of(z.get()) == 1);
  CHECK(log.slot_of(w.get()) == 0);
  // only z's new token is prefilled: its prefix came from the slot's cache
  std::int64_t z_prefill = 0;
  for (const auto& s : log.steps)
    for (const StepRow& r : s)
      if (r.job == z.get() && r.prefill) z_prefill += r.tokens;
  CHECK(z_prefill == 1);
  // v shares nothing with either slot: the least recently used one (slot 1, last used by z)
  Round three(scheduler, log);
  const auto v = three.generation(ids(9000, 10), 2);
  three.run();
  CHECK(log.slot_of(v.get()) == 1);
  scheduler.shutdown();
}

TEST_CASE("scheduler: a request's choices share the slots: a free slot goes to the waiting request with the fewest choices running") {
  Log log;
  kylin::server::Scheduler* self = nullptr;
  // C arrives while A's choices hold both slots: submitted from the step that shows it (on the
  // inference thread, between forwards), so its arrival is an event of the schedule, not a time.
  const auto c = Round::make_generation(ids(6000, 5), 4);
  std::promise<void> c_done;
  c->on_done = [&](kylin::Generation&&, std::optional<kylin::server::Failure> error) {
    CHECK_FALSE(error.has_value());
    c_done.set_value();
  };
  std::vector<std::shared_ptr<Job>> a;
  bool c_sent = false;
  auto o = options(2, log);
  o.on_step = [&](std::span<const StepRow> rows) {
    log.step(rows);
    const auto of_a = std::count_if(rows.begin(), rows.end(), [&](const StepRow& r) {
      return std::any_of(a.begin(), a.end(), [&](const auto& j) { return j.get() == r.job; });
    });
    if (!c_sent && of_a == 2) {
      c_sent = true;
      CHECK(self->submit(c));
    }
  };
  kylin::server::Scheduler scheduler(engine(), o);
  self = &scheduler;
  Round round(scheduler, log);
  a = round.choices(ids(1000, 5), 12, 6);
  round.run();
  REQUIRE(c_done.get_future().wait_for(std::chrono::minutes(5)) == std::future_status::ready);
  scheduler.shutdown();
  const auto first = [&](const Job* j) { return log.steps_of(j).front(); };
  const auto last = [&](const Job* j) { return log.steps_of(j).back(); };
  REQUIRE(c_sent);
  // a[0] prefilled the prompt, a[1] started from it: both slots were A's when C came. The first
  // slot to free went to C (no choice running), not to a[2] (A had one running).
  CHECK(first(a[1].get()) == first(a[0].get()) + 1);
  CHECK(first(c.get()) == last(a[0].get()) + 1);
  CHECK(first(a[2].get()) == last(a[1].get()) + 1);
  CHECK(first(c.get()) < first(a[2].get()));
}

TEST_CASE("scheduler: every choice takes a place: a free slot or one of max_queued; a request of more than max_choices never fits") {
  kylin::server::SchedulerOptions o;
  o.slots = 2;
  o.max_queued = 4;
  kylin::server::Scheduler scheduler(engine(), o);
  CHECK(scheduler.max_choices() == 6);
  // A gate holds the inference thread, so the queue only fills while the test submits.
  std::promise<void> entered, open;
  auto gate = std::make_shared<Job>();
  gate->engine_task = [&, released = open.get_future().share()] { entered.set_value(), released.wait(); };
  gate->on_done = [](kylin::Generation&&, std::optional<kylin::server::Failure>) {};
  REQUIRE(scheduler.submit(gate));
  entered.get_future().wait();
  std::atomic<int> ended{0};
  auto request = [&](int k) {
    std::vector<std::shared_ptr<Job>> jobs;
    for (int i = 0; i < k; ++i) {
      jobs.push_back(Round::make_generation(ids(1000, 5), 2));
      jobs.back()->on_done = [&](kylin::Generation&&, std::optional<kylin::server::Failure> error) {
        CHECK_FALSE(error.has_value());
        ++ended;
      };
      if (i > 0) jobs.back()->prompt_leader = jobs.front();
    }
    return jobs;
  };
  CHECK_FALSE(scheduler.submit(request(7)));  // 2 slots + 4 places
  CHECK(scheduler.submit(request(6)));
  CHECK(scheduler.queued() == 6);
  CHECK_FALSE(scheduler.submit(request(1)));  // every place is taken, the free slots included
  open.set_value();
  scheduler.shutdown();
  CHECK(ended.load() == 6);
  CHECK(scheduler.queued() == 0);
}
