// stoker-worker: the fork server of Loaders in programs that cannot call stoker::init() first
// (stoker::set_worker_executable, stoker/init.h). A Loader starts it; it serves that Loader's
// workers and exits with them. Started by hand, it says what it is for.
#include <cstdio>

#include "stoker/init.h"
#include "stoker/version.h"

int main(int argc, char** argv) {
  stoker::init(argc, argv);  // never returns when a Loader started this process
  std::fprintf(stderr,
               "stoker-worker %s: the fork server of stoker's Loaders. A Loader starts it after\n"
               "stoker::set_worker_executable(\"<path to stoker-worker>\") (the Python package does this\n"
               "itself); it is not meant to be run by hand.\n",
               STOKER_VERSION_STRING);
  return 2;
}
