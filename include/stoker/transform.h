// stoker/transform.h: per-sample code of the user's own, run in the workers after the pipelines.
//
// A transform takes one sample's fields as the pipelines deliver them and returns the fields the
// Loader delivers instead: it may add, drop or change fields (their dtype and shape). What it returns
// is declared up front (Transform::fields), so that the ring is sized before any worker starts; a
// sample that returns something else fails its batch with ErrorCode::transform, naming the sample,
// the field and both shapes.
//
// Where it runs (docs/transform.md):
//   - without workers, in the thread that asks for the batch (Transform::local);
//   - with workers forked from the training process, in each worker (Transform::local, inherited
//     through fork);
//   - with a host program (Transform::host), in workers forked from a fork server that is an exec
//     of that program: its main() calls serve_transform_host(), whose factory rebuilds the
//     transform from Transform::payload once, before the workers are forked (the Python package
//     hosts Python functions so, in the trainer's own interpreter). That program may be started
//     before the Loader and asked questions (StartedHost): the Python package asks it what a
//     function returns on sample 0, so the modules that answer imports serve the workers too.
// Like a pipeline operation, a transform must give the same output for the same (epoch, sample) in
// any worker: randomness drawn from (seed, epoch, index), no state carried between samples.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/dtype.h"
#include "stoker/export.h"

namespace stoker {

// One field of one sample, as a transform receives or returns it; valid for the call only. A bytes
// field (an encoded image, a ragged field) is one-dimensional: {its length} elements of its dtype
// (u8 for bytes, i32 for h5py's vlen int32 token ids).
struct SampleField {
  std::string_view name;
  DType dtype = DType::u8;
  std::span<const std::int64_t> shape;
  std::span<const std::byte> data;  // C order, exactly the shape's bytes
};

// Where a transform puts the fields of its sample: one put() per declared field, in any order.
// put() copies the data; it throws stoker::Error (ErrorCode::transform) for a field that was not
// declared, was put twice, or has another dtype or shape than declared.
class STOKER_API SampleSink {
 public:
  virtual void put(const SampleField& field) = 0;

 protected:
  ~SampleSink() = default;
};

class STOKER_API SampleTransform {
 public:
  virtual ~SampleTransform();
  // Sample `index` (of the dataset) in `epoch`: `in` holds its fields in delivery order; every
  // declared field is put into `out`. Throws stoker::Error (ErrorCode::transform) saying what went
  // wrong; the batch fails with that text, the sample named before it.
  virtual void apply(std::span<const SampleField> in, std::uint64_t epoch, std::uint64_t index, SampleSink& out) = 0;
};

// A field a transform returns.
struct TransformField {
  std::string name;
  DType dtype = DType::u8;
  std::vector<std::int64_t> shape;  // per sample, {} for a scalar; ragged: the first dimension varies
  // Its first dimension may differ per sample: delivered as a bytes field (its values' bytes back to
  // back, `name.offsets` in bytes); `max_sample_bytes` sizes its region in the ring (a batch holds
  // batch_size times as many bytes, in any mix), and a batch that needs more fails naming the field.
  bool ragged = false;
  std::uint64_t max_sample_bytes = 0;
  bool operator==(const TransformField&) const = default;
};

namespace detail {
struct StartedHostAccess;
}

// A transform's host program (Transform::host) started before its Loader, to be asked questions
// first: what it imports to answer them (the Python package asks what a function returns on sample
// 0) is then imported once, in the process the Loader's workers are forked from. The first Loader
// with workers that Transform::started is given to takes it as its fork server (once: the others
// start `host` anew, as does a Loader whose question is still unanswered, which discards it); a
// Loader without workers discards it. One that nothing took is killed and reaped when discarded or
// destroyed, in the process that started it only. ask() and answer() are not thread-safe.
class STOKER_API StartedHost : public std::enable_shared_from_this<StartedHost> {
 public:
  // Starts `argv` (argv[0] the path exec'd), a program whose main() calls serve_transform_host
  // with an answer function. Throws stoker::Error (ErrorCode::io) when it cannot fork; an exec that
  // fails is the error of the first ask() or answer().
  static std::shared_ptr<StartedHost> start(const std::vector<std::string>& argv);
  ~StartedHost();  // discard()
  StartedHost(const StartedHost&) = delete;
  StartedHost& operator=(const StartedHost&) = delete;

  // Its process id; -1 once discarded or taken by a Loader.
  int pid() const noexcept { return pid_.load(); }
  // Sends `question` to the host's answer function, waiting up to `timeout` for it to be taken;
  // answer() gives what it returned. Throws stoker::Error: ErrorCode::transform when the host is
  // gone or did not take it in time (it is then discarded), or as answer() does.
  void ask(const std::string& question, std::chrono::milliseconds timeout);
  // The answer to the question asked, waiting up to `wait` for it; nullopt when it has not come
  // yet. Throws stoker::Error when the host ended (ErrorCode::transform, saying how: its exit
  // status or signal, or the text and code of a host whose answer function threw) or broke the
  // protocol (ErrorCode::internal); the host is then reaped.
  std::optional<std::string> answer(std::chrono::milliseconds wait);
  // Kills and reaps the host unless a Loader took it. Never throws.
  void discard() noexcept;

 private:
  friend struct detail::StartedHostAccess;
  StartedHost(int pid, int sock) noexcept;
  // Reaps the host, which ended or broke the protocol, and throws stoker::Error saying how.
  [[noreturn]] void ended();
  std::atomic<int> pid_{-1};
  int sock_ = -1;
  int owner_ = -1;           // the process that started it, which alone may end it
  bool unanswered_ = false;  // a question was asked and its answer not read
};

// Options::transform. Without fields, there is none.
struct Transform {
  std::vector<TransformField> fields;  // what it returns, in delivery order
  std::shared_ptr<SampleTransform> local;
  // The program that hosts it, as argv (host[0] is the path exec'd), and what that program's
  // factory rebuilds it from. Needed for workers when this process starts them by exec
  // (stoker/init.h); used for them whenever given.
  std::vector<std::string> host;
  std::string payload;
  // The host already started and asked its questions (StartedHost): the Loader's workers are
  // forked from it rather than from a new start of `host` (which a restarted fork server uses).
  std::shared_ptr<StartedHost> started;

  bool enabled() const noexcept { return !fields.empty(); }
};

// What a host's interpreter does around each fork of a worker (CPython: PyOS_BeforeFork,
// PyOS_AfterFork_Parent, PyOS_AfterFork_Child): its locks and at-fork handlers kept consistent.
struct ForkHooks {
  std::function<void()> before;  // in the host, before fork
  std::function<void()> parent;  // in the host, after fork (whether or not it succeeded)
  std::function<void()> child;   // in the worker, first
};

// In a program started as a transform host (Transform::host): answers each question a
// StartedHost asks before the setup with `answer(question)`, receives the Loader's setup, calls
// `factory(payload)` once, then forks the workers, around each fork calling `hooks`, and serves
// them. Never returns; throws stoker::Error (ErrorCode::invalid_option) in a process that was not
// started as a fork server. An answer function that throws ends the host, its text the error the
// asker gets.
using TransformFactory = std::function<std::shared_ptr<SampleTransform>(const std::string& payload)>;
using TransformAnswer = std::function<std::string(const std::string& question)>;
[[noreturn]] STOKER_API void serve_transform_host(const TransformFactory& factory, const ForkHooks& hooks = {},
                                                  const TransformAnswer& answer = {});

}  // namespace stoker
