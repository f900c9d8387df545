// A user's program against the installed stoker: one shuffled epoch with workers, and the digests
// that prove what it delivered (compared with the installed loader-bench by run.cmake).
//   train DATA
#include <stoker/digest.h>
#include <stoker/loader.h>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: train DATA\n";
    return 2;
  }
  stoker::Options opt;
  opt.source = argv[1];
  opt.batch_size = 64;
  opt.num_workers = 2;
  opt.shuffle = true;
  opt.seed = 7;
  try {
    stoker::Loader loader(opt);
    stoker::ContentDigest content;
    stoker::OrderDigest order;
    std::uint64_t samples = 0;
    for (stoker::Batch& batch : loader.epoch(0)) {
      content.add(batch);
      order.add(batch);
      samples += batch.size();
    }
    std::cout << "samples " << samples << " content_digest " << content.hex() << " order_digest " << order.hex()
              << "\n";
  } catch (const stoker::Error& e) {
    std::cerr << "train: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
