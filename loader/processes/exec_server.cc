#include "loader/processes/exec_server.h"

#include <fmt/format.h>

#include <functional>
#include <vector>

#include "loader/children/child_hygiene.h"
#include "loader/pipeline/pipeline.h"
#include "loader/processes/server_loop.h"
#include "loader/processes/setup_channel.h"
#include "loader/shm/segment_layout.h"
#include "loader/shm/shm_segment.h"
#include "loader/worker/transform_stage.h"
#include "loader/worker/worker.h"
#include "loader/worker/worker_setup.h"
#include "stoker/error.h"
#include "stoker/version.h"

namespace stoker::detail {
namespace {

// What the workers use, kept for the process's life: the dataset, the mapping, its layout, and the
// descriptors.
struct Served {
  WorkerSetup setup;
  std::vector<UniqueFd> fds;
  ShmSegment segment = ShmSegment::create_private(1);
  std::unique_ptr<SegmentLayout> layout;
};

Served& served() {
  static Served s;
  return s;
}

// Receives, checks and maps the setup, answering the questions before it; throws stoker::Error
// saying what does not fit.
void receive(int sock, const TransformAnswer& answer) {
  Served& s = served();
  ReceivedSetup received = receive_setup(sock, answer);
  s.setup = setup_from_json(received.text);
  const RingSetup& ring = s.setup.ring;
  set_option_spelling(ring.option_spelling);  // the workers' messages in the loader's words
  if (ring.stoker_version != version()) {
    throw Error(ErrorCode::internal,
                fmt::format("stoker: the loader is stoker {} and its fork server stoker {}: the fork server is this "
                            "program started again, so the two must be the same build",
                            ring.stoker_version, version()));
  }
  if (received.fds.size() != kSetupFixedFds + ring.num_workers) {
    throw Error(ErrorCode::internal, fmt::format("stoker: the worker setup came with {} descriptors, not {}",
                                                 received.fds.size(), kSetupFixedFds + ring.num_workers));
  }
  s.fds = std::move(received.fds);
  s.segment = ShmSegment::map_shared(s.fds[0].get(), ring.segment_bytes);
  const DatasetSpec& d = s.setup.dataset;
  const Schema delivered = delivered_schema(d);
  s.layout = std::make_unique<SegmentLayout>(delivered, ring.batch_size, ring.num_workers, ring.sample_bound);
  if (const std::string why = s.layout->check(s.segment.data(), s.segment.size()); !why.empty()) {
    throw Error(ErrorCode::internal, fmt::format("stoker: the fork server refuses the loader's ring: {}", why));
  }
}

}  // namespace

void serve_exec_fork_server(int sock, const TransformFactory* factory, const ForkHooks* hooks,
                            const TransformAnswer* answer) {
  // A transform host closes the descriptors inherited from the loader's process first, before the
  // user's modules (imported to answer questions, or by the factory) open theirs (a file at
  // import), which the workers then inherit; those it is sent with the setup come after.
  if (factory) close_all_except({sock});
  try {
    receive(sock, answer ? *answer : TransformAnswer{});
    const DatasetSpec& d = served().setup.dataset;
    if (!d.transform.empty()) {
      if (!factory) {
        throw Error(ErrorCode::invalid_option,
                    "stoker: this fork server was sent a transform, and it is no transform host "
                    "(serve_transform_host, stoker/transform.h)");
      }
      std::shared_ptr<SampleTransform> t = (*factory)(d.transform_payload);
      if (!t) throw Error(ErrorCode::transform, "stoker: the transform host's factory made no transform");
      set_hosted_transform(std::move(t));
    }
  } catch (const Error& e) {
    fail_setup(sock, static_cast<int>(e.code()), e.what());
  } catch (const std::exception& e) {
    fail_setup(sock, static_cast<int>(ErrorCode::internal), e.what());
  }
  const Served& s = served();
  std::vector<int> keep;
  for (std::size_t i = 2; i < s.fds.size(); ++i) keep.push_back(s.fds[i].get());
  const std::function<void(std::uint32_t)> worker_main = [](std::uint32_t w) {
    const Served& in = served();
    in.segment.prefault();
    run_worker(WorkerContext{in.layout.get(), in.segment.data(), in.segment.size(), w, in.fds[kSetupFixedFds + w].get(),
                             in.fds[2].get(), in.fds[1].get(), &in.setup.dataset});
  };
  serve(sock, s.fds[1].get(), s.setup.ring.num_workers, worker_main, std::move(keep), hooks, !factory);
}

}  // namespace stoker::detail
