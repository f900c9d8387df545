#include "loader/worker/stage_times.h"

namespace stoker::detail {

std::vector<std::string> worker_stage_names(const SamplePipelines& pipelines) {
  std::vector<std::string> out{"read", "transform", "write"};
  for (std::string& op : pipelines.stage_names()) out.push_back(std::move(op));
  if (out.size() > kStageSlots) {
    out.resize(kStageSlots);
    out.back() = "other operations";
  }
  return out;
}

}  // namespace stoker::detail
