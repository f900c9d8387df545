// stoker/loader.h: the data loader.
//
//   stoker::Loader loader(options);              // forks workers, sizes shm, or throws
//   for (stoker::Batch& batch : loader.epoch(e)) { ... }
//
// Batches come in the same order for a given seed whatever the number of workers, each sample of
// the epoch (or of this rank's shard) exactly once. Workers are processes forked by a small
// single-threaded fork server that the Loader starts in its constructor, before any thread of its
// own; each opens its own HDF5 file or LMDB environment on its first batch. With stoker::init()
// (stoker/init.h) the fork server is a fresh exec of the program and Loaders may be built at any
// time. Without it, RULE: create loaders before starting threads that use HDF5 (a thread inside
// HDF5 at fork time leaves HDF5's state locked in every worker).
//
// Thread-safety: a Loader and its Epochs may be used from several threads at once (a thread that
// prefetches batches beside the training loop, a monitor that reads stats()):
//   - The calls that start epochs or hand batches out (Loader::epoch, Epoch::next, Epoch::wait)
//     take turns: each batch goes to exactly one caller, in order, whichever thread asks. wait()
//     says whether next() would not wait; with several threads taking batches, another may take
//     that batch first.
//   - state(), stats() and worker_pids() may be called from any thread at any time: they do not
//     wait for a batch that another thread waits for from workers (at most for one slice of its
//     wait, 100 ms, or for an epoch being started; with num_workers = 0 the batch is read by the
//     thread that takes it, and stats() waits for that read). schema(), options() and the counts per
//     epoch never change. Epoch::wait(at_most) waits at most `at_most`, another thread's call
//     included.
//   - The batches every thread holds count against Options::held_batches together: a thread that
//     prefetches into a queue of N batches needs held_batches of at least N plus the training
//     loop's own.
//   - Destroying the Loader while another thread is inside Epoch::next() or wait() ends that call
//     at once: next() throws stoker::Error (ErrorCode::invalid_option) as for an Epoch whose Loader
//     is gone, and the workers stop once it has returned.
// Batches may be destroyed on any thread, also after the Loader.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stoker/batch.h"
#include "stoker/error.h"
#include "stoker/export.h"
#include "stoker/options.h"
#include "stoker/schema.h"
#include "stoker/state.h"
#include "stoker/stats.h"

namespace stoker {

namespace detail {
class LoaderImpl;
}

class Loader;

// The batches of one epoch, as a single-pass range. Starting another epoch on the same Loader
// ends this one. An Epoch may outlive its Loader: next() then throws stoker::Error
// (ErrorCode::invalid_option) saying so, and an iteration in progress ends with it.
class STOKER_API Epoch {
 public:
  // Next batch, or nullopt at the end of the epoch. Throws stoker::Error when a worker failed on
  // this batch, a worker died, every slot is held by live batches, or the timeout passed.
  std::optional<Batch> next();
  // Waits at most `at_most` until next() can answer without waiting for workers (a batch is ready,
  // an error is known, or the epoch is over); returns whether it can. For a caller that must do
  // something else while it waits, such as an interpreter that checks for Ctrl-C. Dead and stuck
  // workers are handled meanwhile, as in next(). With num_workers = 0, next() reads the batch in
  // the calling thread and this returns true at once.
  bool wait(std::chrono::milliseconds at_most);

  class iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    Batch& operator*() const { return *current_; }
    Batch* operator->() const { return &*current_; }
    iterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return !current_; }

   private:
    friend class Epoch;
    explicit iterator(Epoch* epoch);
    Epoch* epoch_ = nullptr;
    mutable std::optional<Batch> current_;
  };
  iterator begin() { return iterator(this); }
  std::default_sentinel_t end() const { return {}; }

 private:
  friend class Loader;
  Epoch(std::weak_ptr<detail::LoaderImpl> impl, std::uint64_t generation)
      : impl_(std::move(impl)), generation_(generation) {}
  std::weak_ptr<detail::LoaderImpl> impl_;
  std::uint64_t generation_;
};

class STOKER_API Loader {
 public:
  explicit Loader(Options options);
  // As Loader(options), for a program that must do something else while the Loader is built, such
  // as an interpreter that turns Ctrl-C into an exception: `keep_going` is called on the calling
  // thread at least every 100 ms while the constructor waits for the process that reads the
  // dataset's metadata (which is given 10 s without progress: docs/faults.md), and once before
  // workers start. When it returns false, the constructor ends what it started (that process) and
  // throws stoker::Error (ErrorCode::interrupted); an exception it throws passes through the same
  // way. Nothing else in a constructor waits on something that may never answer.
  Loader(Options options, const std::function<bool()>& keep_going);
  // Stops the workers, or lets the last call of another thread inside Epoch::next() or wait() do
  // so when it returns (see the thread-safety above).
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts epoch `epoch` (its shuffle order depends on (seed, epoch)) at batch `start_batch`, for
  // resuming mid-epoch with the same shard and batch size. Batches still loading for a previous
  // epoch are discarded.
  Epoch epoch(std::uint64_t epoch, std::uint64_t start_batch = 0);

  // Resumes the epoch a saved state is in: the samples it had not consumed, once across this
  // loader's shard (any world size, batch size or worker count). Throws stoker::Error when the
  // state is for another dataset or order (saying what differs) or its epoch is finished.
  Epoch epoch(const LoaderState& state);

  // Where the newest epoch is: after each rank has received the same number of batches, the same
  // state on every rank (stoker/state.h). Save it with the model; resume with epoch(state).
  LoaderState state() const;

  // The delivered fields, in delivery order (a field with a pipeline as its output); num_samples
  // of the whole dataset.
  const Schema& schema() const;
  // How stoker understood the dataset where that is not plain: an LMDB without a stoker schema
  // (how its keys and values were read), sample groups and variable-length datasets in HDF5, and
  // the pipelines. Empty otherwise.
  std::string describe_source() const;
  // What the dataset stores beside its samples, by name, read once at construction: an HDF5 file's
  // string attributes, an LMDB's records beside its schema, a shard set's first shard's. Datasets
  // packed by stoker-pack hold "labels", a JSON object giving each label field the names of its
  // values (the class names, {"label": ["cat", "dog"]}), and HDF5 ones "content_digest". Text only,
  // at most 256 entries and 16 MiB (docs/hdf5.md); empty for a dataset that stores none.
  const std::map<std::string, std::string>& metadata() const;
  const Options& options() const;
  std::uint64_t batches_per_epoch() const;
  std::uint64_t samples_per_epoch() const;
  Stats stats() const;
  // Process ids of the workers (empty with num_workers = 0), for monitoring and debugging.
  std::vector<int> worker_pids() const;
  // Writes the index of this loader's shard set to `path` ("": "stoker-index.json" beside its first
  // shard) and returns where: store it beside the shards, and a loader that reads them from the
  // store on a node that never did starts at once, fetching the shards as its first epoch reads
  // them (docs/remote.md, "An index"). Reads every shard once, in the calling thread: call it while
  // no other thread reads this Loader's epochs. Throws stoker::Error (invalid_option) for a mix, a
  // set read from a store without a path, or one read through a cache smaller than it.
  std::string write_index(const std::string& path = "") const;

 private:
  std::shared_ptr<detail::LoaderImpl> impl_;
};

}  // namespace stoker
