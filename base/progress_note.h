// Progress notes: how work that another process watches for signs of life says it is moving. The
// probe (loader/child_reads/probe.h) reads a dataset's metadata in a process of its own, and is killed
// when it makes no progress for a while: a loop in HDF5 on a damaged file makes none. Long,
// legitimate work along the way (opening each shard of a set, scanning an LMDB database's keys)
// calls note_progress() at each of its steps, so that it is told from such a loop; every loop that
// notes progress is bounded by what it counts (shards, keys, members), so that a damaged file
// cannot make one note progress for ever.
//
// Without a sink installed (the trainer, workers, tools) a note costs one relaxed atomic load.
#pragma once

#include <atomic>

namespace stoker::detail {

// Receives the notes (one call per note; a sink that writes somewhere limits its own rate).
using ProgressSink = void (*)() noexcept;

inline std::atomic<ProgressSink> g_progress_sink{nullptr};  // the process's (libstoker is one library)

inline void note_progress() noexcept {
  if (const ProgressSink sink = g_progress_sink.load(std::memory_order_relaxed)) sink();
}

// Installs `sink` (nullptr: none) for the whole process. For a process that is watched: the probe.
inline void set_progress_sink(ProgressSink sink) noexcept { g_progress_sink.store(sink, std::memory_order_relaxed); }

}  // namespace stoker::detail
