// The installed LibTorch adapter: the demo dataset's batches as tensors, labels checked against
// the indices they came from (the demo's label is index % 1000).
//   train_torch DATA
#include <stoker/loader.h>
#include <stoker/torch.h>
#include <torch/torch.h>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  stoker::Options opt;
  opt.source = argv[1];
  opt.batch_size = 100;
  opt.num_workers = 1;
  try {
    stoker::Loader loader(opt);
    std::int64_t samples = 0;
    for (stoker::Batch& batch : loader.epoch(0)) {
      std::vector<std::int64_t> want(batch.indices().begin(), batch.indices().end());
      auto t = stoker::to_tensors(std::move(batch));
      auto expected = torch::tensor(want, torch::kInt64).remainder(1000);
      if (!torch::equal(t["label"], expected) || t["image"].size(1) != 3 || t["image"].dtype() != torch::kUInt8) {
        std::cerr << "train_torch: batch with wrong contents\n";
        return 1;
      }
      samples += t["label"].size(0);
    }
    std::cout << "torch samples " << samples << "\n";
  } catch (const stoker::Error& e) {
    std::cerr << "train_torch: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
