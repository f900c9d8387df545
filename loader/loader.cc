// stoker::Loader and stoker::Epoch (stoker/loader.h): the public handles of a LoaderImpl
// (loader/loader_impl.h).
#include "stoker/loader.h"

#include <fmt/format.h>

#include <new>
#include <ostream>
#include <stdexcept>

#include "base/posix_error.h"
#include "formats/shard_set.h"
#include "loader/loader_impl.h"
#include "loader/set_index.h"

namespace stoker {
namespace {

// No allocation failure leaves the API bare. A file can claim more than the machine holds (a 1 KB HDF5
// file of 2^32 samples): an allocation that fails is named with the file and what was being done,
// never a bare std::bad_alloc.
template <class F>
auto guarded(const std::string& source, const char* doing, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::io, fmt::format("stoker: {}: out of memory {}: the dataset claims more (samples, or bytes "
                                           "a sample) than this process could allocate",
                                           source, doing));
  } catch (const std::length_error& e) {
    throw Error(ErrorCode::io, fmt::format("stoker: {}: too large {} ({})", source, doing, e.what()));
  }  // anything else is the caller's own (an on_warning callback's, say) and passes through as it is
}

}  // namespace

Loader::Loader(Options options) : Loader(std::move(options), {}) {}
Loader::Loader(Options options, const std::function<bool()>& keep_going)
    : impl_(guarded(options.sources.empty() ? options.source : options.sources.front(), "building the loader",
                    [&] { return std::make_shared<detail::LoaderImpl>(std::move(options), keep_going); })) {}
Loader::~Loader() {
  // Another thread may be inside Epoch::next() or wait() and hold the LoaderImpl: it returns at
  // once, and the last to let go of it destroys it (stops the workers).
  if (impl_) impl_->detach();
}

Epoch Loader::epoch(std::uint64_t epoch, std::uint64_t start_batch) {
  return Epoch(impl_, guarded(formats::source_name(impl_->options().source), "starting an epoch",
                              [&] { return impl_->start_epoch(epoch, start_batch); }));
}

Epoch Loader::epoch(const LoaderState& state) {
  return Epoch(impl_, guarded(formats::source_name(impl_->options().source), "resuming an epoch",
                              [&] { return impl_->resume(state); }));
}

LoaderState Loader::state() const { return impl_->state(); }

const Schema& Loader::schema() const { return impl_->schema(); }
std::string Loader::describe_source() const { return impl_->source_description(); }
const std::map<std::string, std::string>& Loader::metadata() const { return impl_->metadata(); }
const Options& Loader::options() const { return impl_->options(); }
std::uint64_t Loader::batches_per_epoch() const { return impl_->sampler().batches_per_epoch(); }
std::uint64_t Loader::samples_per_epoch() const { return impl_->sampler().samples_per_epoch(); }
Stats Loader::stats() const { return impl_->stats(); }
std::vector<int> Loader::worker_pids() const { return impl_->worker_pids(); }
std::string Loader::write_index(const std::string& path) const {
  return detail::write_loader_index(path, impl_->options(), impl_->reader_options(), impl_->remote_shards());
}

std::optional<Batch> Epoch::next() {
  const std::shared_ptr<detail::LoaderImpl> impl = impl_.lock();
  if (!impl) {
    throw Error(ErrorCode::invalid_option,
                "stoker: this epoch's Loader was destroyed; an Epoch delivers batches while its Loader lives");
  }
  return guarded(formats::source_name(impl->options().source), "delivering a batch",
                 [&] { return impl->next(generation_); });
}

bool Epoch::wait(std::chrono::milliseconds at_most) {
  const std::shared_ptr<detail::LoaderImpl> impl = impl_.lock();
  if (!impl) return true;  // next() says why at once
  return impl->wait_ready(generation_, at_most);
}

Epoch::iterator::iterator(Epoch* epoch) : epoch_(epoch) { current_ = epoch_->next(); }

Epoch::iterator& Epoch::iterator::operator++() {
  current_.reset();  // return the slot before asking for the next batch
  current_ = epoch_->next();
  return *this;
}

std::ostream& operator<<(std::ostream& os, const Stats& s) {
  os << fmt::format(
      "batches {} samples {} bytes {} wait {:.3f}s worker busy {:.3f}s worker cpu {:.3f}s workers {} depth {} shm {}",
      s.batches, s.samples, detail::format_bytes(s.bytes), s.wait_seconds, s.worker_busy_seconds, s.worker_cpu_seconds,
      s.workers, s.depth, detail::format_bytes(s.shm_bytes));
  if (s.skipped_samples) os << fmt::format(" skipped {}", s.skipped_samples);
  if (!s.verdict.empty()) os << "; " << s.verdict;
  return os;
}

}  // namespace stoker
