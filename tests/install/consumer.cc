#include <stoker/loader.h>

#include <iostream>

int main(int argc, char** argv) {
  stoker::Options opt;
  opt.source = argc > 1 ? argv[1] : "/nonexistent/train.lmdb";
  opt.batch_size = 4;
  try {
    stoker::Loader loader(opt);
    std::cout << "opened " << loader.schema().fields.size() << " fields\n";
  } catch (const stoker::Error& e) {
    std::cout << "stoker::Error: " << e.what() << "\n";
    return 0;
  }
  return 0;
}
