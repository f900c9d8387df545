// The datasets loader-bench writes: the benchmarks' standard sets and the demo, each written whole
// (a run stopped half-way leaves no half dataset under its name).
#pragma once

#include <cstdint>
#include <string>

namespace stoker::tools {

// DIR/small.h5, small-gzip.h5, small.lmdb (100,000 samples of u8[3,32,32] and a label) and
// DIR/large.h5, large.lmdb (3,000 of u8[3,224,224]); those already there are kept. `quiet`: no
// progress lines.
void write_bench_data(const std::string& dir, bool quiet);
// The demo dataset: image u8[3,32,32] and label i64, as DIR/demo.h5 (chunked) and DIR/demo.lmdb.
void write_demo(const std::string& dir, std::uint64_t samples);

}  // namespace stoker::tools
