#include "loader/shard_fetcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <utility>

#include "base/option_spelling.h"
#include "base/posix_error.h"
#include "loader/set_index.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {
using Clock = std::chrono::steady_clock;

}  // namespace

ShardFetcher::ShardFetcher(std::vector<std::optional<RemoteShard>> shards, std::size_t capacity,
                           remote::CacheOptions cache, remote::FetchCounters& counters)
    : shards_(std::move(shards)),
      digests_(shards_.size()),
      capacity_(std::max<std::size_t>(capacity, 1)),
      cache_(std::move(cache)),
      counters_(counters),
      held_(shards_.size()) {}

ShardFetcher::~ShardFetcher() {
  {
    std::lock_guard lock(mu_);
    quit_ = true;
  }
  stop_fetches_ = true;
  changed_.notify_all();
  for (auto& t : threads_) t.join();
}

void ShardFetcher::expect_digests(std::vector<std::optional<std::uint64_t>> digests) {
  std::lock_guard lock(mu_);
  digests.resize(shards_.size());
  digests_ = std::move(digests);
}

remote::HeldObject ShardFetcher::hold_checked(std::size_t k, const remote::FetchPolicy& policy) {
  const RemoteShard& shard = *shards_[k];
  remote::HeldObject held = remote::hold_object(shard.object, shard.info, shard.path, policy, counters_);
  if (!digests_[k]) return held;  // nothing says what its bytes must be
  const std::uint64_t want = *digests_[k];
  if (held.digest() == want) return held;
  // A copy cached before the shard changed under the same name and size (a server without ETags):
  // fetched again, and refused if its bytes are still not the index's.
  if (remote::evict(std::move(held))) ++counters_.evictions;
  remote::FetchCounters again;  // whether this hold fetched it, whatever the other threads do
  held = remote::hold_object(shard.object, shard.info, shard.path, policy, again);
  counters_.add(again);
  const std::optional<std::uint64_t> got = held.digest();
  if (got == want) return held;
  if (again.downloads == 0) {  // the same copy: another process holds it, so it stayed
    throw Error(ErrorCode::dataset,
                fmt::format("{}: its copy in the cache ({}) is not the bytes the set's index ({} beside it) "
                            "describes, and another process on this node holds it, so it cannot be fetched again "
                            "now: it was cached before the shard changed under the same name and size (a store that "
                            "gives no ETag); delete it while no loader runs",
                            shard.object.name, shard.path, kIndexName));
  }
  throw Error(
      ErrorCode::dataset,
      fmt::format("{}: its bytes are not those the set's index ({} beside it) describes (XXH3 {:016x} there, {} "
                  "here): the shard changed since the index was written; write it again "
                  "(Loader::write_index), or delete it",
                  shard.object.name, kIndexName, want, got ? fmt::format("{:016x}", *got) : std::string("none")));
}

void ShardFetcher::hold_only(const std::vector<std::uint32_t>& wanted, const std::function<bool()>& keep_going) {
  const std::set<std::uint32_t> want(wanted.begin(), wanted.end());
  std::vector<remote::RemoteObject> objects;
  std::vector<remote::ObjectInfo> infos;
  std::vector<std::string> paths;
  std::vector<std::uint32_t> fetched;
  {
    std::lock_guard lock(mu_);
    for (std::uint32_t k = 0; k < held_.size(); ++k) {
      if (held_[k] && !want.contains(k)) {
        remote::evict(std::move(held_[k]));
        held_[k] = {};
        ++counters_.evictions;
      }
    }
    for (std::uint32_t k : want) {
      if (!shards_[k] || held_[k]) continue;
      objects.push_back(shards_[k]->object);
      infos.push_back(shards_[k]->info);
      paths.push_back(shards_[k]->path);
      fetched.push_back(k);
    }
  }
  remote::CacheOptions o = cache_;
  o.keep_going = keep_going;
  const remote::FetchTime timed(counters_);  // the construction's fetches (Stats::fetch_seconds)
  std::vector<remote::HeldObject> got = remote::hold_objects(objects, infos, paths, o, counters_);
  std::lock_guard lock(mu_);
  for (std::size_t j = 0; j < fetched.size(); ++j) held_[fetched[j]] = std::move(got[j]);
}

void ShardFetcher::hold_found() {
  std::lock_guard lock(mu_);
  std::size_t held = 0;
  for (const auto& h : held_) held += static_cast<bool>(h);
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    if (!shards_[k] || held_[k]) continue;
    // Whole and not being evicted: taken as it is, never waited for nor fetched here.
    std::optional<remote::HeldObject> found = remote::try_hold(shards_[k]->path, shards_[k]->info.size);
    if (!found) continue;
    if (digests_[k] && found->digest() != digests_[k]) continue;  // another version: fetched again
    if (held < capacity_) {
      held_[k] = std::move(*found);
      ++held;
      ++counters_.cache_hits;
    } else if (remote::evict(std::move(*found))) {
      ++counters_.evictions;  // left by a loader gone, beyond what this one holds: no one's now
    }
  }
}

void ShardFetcher::start(const EpochPlan& plan, std::uint64_t first, const std::vector<std::uint64_t>& starts) {
  std::vector<bool> remote(shards_.size());
  for (std::size_t k = 0; k < shards_.size(); ++k) remote[k] = shards_[k].has_value();
  std::vector<std::uint32_t> cached;
  {
    std::lock_guard lock(mu_);
    for (std::uint32_t k = 0; k < held_.size(); ++k) {
      // One deleted meanwhile by hand (a cleaned cache directory) is fetched again.
      if (held_[k] && !remote::is_cached(shards_[k]->path, shards_[k]->info.size)) held_[k] = {};
      if (held_[k]) cached.push_back(k);
    }
  }
  ShardSchedule schedule;
  try {
    schedule = belady_schedule(batch_shards(plan, first, starts, remote), capacity_, cached);
  } catch (const Error& e) {
    std::uint64_t largest = 0;
    for (const auto& s : shards_) largest = std::max<std::uint64_t>(largest, s ? s->info.size : 0);
    throw Error(e.code(), fmt::format("stoker: epoch {}: {} ({} is {}, the largest shard {}): raise it, or use an "
                                      "order that reads a few shards at a time ({} = \"quasi_random\"; "
                                      "docs/sampler.md)",
                                      plan.epoch, e.what(), option_name("cache_limit"), format_bytes(cache_.limit),
                                      format_bytes(largest), option_name("order")));
  }
  {
    std::lock_guard lock(mu_);
    schedule_ = std::move(schedule);
    first_ = first;
    next_step_ = steps_done_ = 0;
    step_done_.assign(schedule_.steps.size(), false);
    taken_before_ = first;
    error_ = nullptr;
    started_ = true;
    stop_fetches_ = false;
  }
  changed_.notify_all();
  while (threads_.size() < std::max<std::size_t>(1, cache_.parallelism)) {
    threads_.emplace_back([this, t = static_cast<std::uint32_t>(threads_.size())] { fetch_loop(t); });
  }
}

void ShardFetcher::abandon() noexcept {
  std::unique_lock lock(mu_);
  if (!started_) return;
  started_ = false;  // no step is taken from here on
  stop_fetches_ = true;
  changed_.notify_all();
  changed_.wait(lock, [&] { return running_ == 0; });
  stop_fetches_ = false;
  schedule_ = {};
  step_done_.clear();
}

void ShardFetcher::taken_before(std::uint64_t b) {
  {
    std::lock_guard lock(mu_);
    if (b <= taken_before_) return;
    taken_before_ = b;
  }
  changed_.notify_all();
}

bool ShardFetcher::can_take() const {
  if (!started_ || error_ || next_step_ >= schedule_.steps.size()) return false;
  const FetchStep& step = schedule_.steps[next_step_];
  // The shard it evicts is cached (an earlier step fetched it) and no batch still to be read
  // before the eviction point needs it.
  return !step.evict || (held_[*step.evict] && step.evict_after <= taken_before_);
}

void ShardFetcher::fetch_loop(std::uint32_t thread) {
  remote::FetchPolicy policy = cache_.policy;
  policy.stop = &stop_fetches_;
  std::unique_lock lock(mu_);
  for (;;) {
    changed_.wait(lock, [&] { return quit_ || can_take(); });
    if (quit_) return;
    const std::size_t k = next_step_++;
    const FetchStep step = schedule_.steps[k];
    remote::HeldObject victim = step.evict ? std::move(held_[*step.evict]) : remote::HeldObject();
    if (step.evict) held_[*step.evict] = {};
    ++running_;
    lock.unlock();
    std::exception_ptr failed;
    remote::HeldObject got;
    const auto t0 = Clock::now();
    try {
      if (victim) {
        remote::evict(std::move(victim));
        ++counters_.evictions;
      }
      got = hold_checked(step.shard, policy);
    } catch (...) {
      failed = std::current_exception();
    }
    if (trace_) {
      trace_->span(TraceWriter::fetch_track(thread), "fetch", t0, Clock::now() - t0,
                   fmt::format(R"("shard":{},"batch":{}{}{})", step.shard, step.batch,
                               step.evict ? fmt::format(R"(,"evicted":{})", *step.evict) : "",
                               failed ? R"(,"failed":true)" : ""));
    }
    lock.lock();
    --running_;
    if (failed) {
      if (started_ && !error_) error_ = failed;  // an abandoned epoch's stop is no error
    } else {
      held_[step.shard] = std::move(got);
      if (started_ && k < step_done_.size()) {
        step_done_[k] = true;
        while (steps_done_ < step_done_.size() && step_done_[steps_done_]) ++steps_done_;
      }
    }
    changed_.notify_all();
  }
}

bool ShardFetcher::is_ready(std::uint64_t b) const {
  if (error_) std::rethrow_exception(error_);
  if (!started_ || b < first_ || b - first_ >= schedule_.steps_before.size()) return true;
  return steps_done_ >= schedule_.steps_before[b - first_];
}

bool ShardFetcher::ready(std::uint64_t b) {
  std::lock_guard lock(mu_);
  return is_ready(b);
}

bool ShardFetcher::wait_ready(std::uint64_t b, Clock::time_point until) {
  std::unique_lock lock(mu_);
  if (is_ready(b)) return true;
  const auto t0 = Clock::now();
  const auto done = [&] { return interrupted_ || error_ || is_ready(b); };
  bool ready = true;
  if (until == Clock::time_point::max()) {
    changed_.wait(lock, done);
  } else {
    ready = changed_.wait_until(lock, until, done);
  }
  const auto t1 = Clock::now();
  waited_ += std::chrono::duration<double>(t1 - t0).count();
  if (trace_) trace_->span(0, "wait for remote shards", t0, t1 - t0, fmt::format(R"("batch":{})", b));
  if (interrupted_) throw Error(ErrorCode::interrupted, "stoker: the loader is shutting down");
  return ready && is_ready(b);
}

void ShardFetcher::interrupt() noexcept {
  {
    std::lock_guard lock(mu_);
    interrupted_ = true;
  }
  changed_.notify_all();
}

double ShardFetcher::waited_seconds() const {
  std::lock_guard lock(mu_);
  return waited_;
}

}  // namespace stoker::detail
