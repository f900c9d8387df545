// stoker/error.h: the one exception type stoker throws, and what kind of failure it reports.
//
// Every message reads "context: detail": it names the file, field, sample index or LMDB key,
// worker and pid involved, and, where there is one, what the user can do about it. The code says
// what kind of failure it is, so that a program can tell a retryable fault from a bad option
// without parsing the text. Thread-safe like any std::exception.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "stoker/export.h"

namespace stoker {

// New codes are appended: the numbering is part of the ABI.
enum class ErrorCode : std::uint8_t {
  invalid_option = 1,  // an option, pipeline text or argument the loader cannot take: fix the call
  dataset,             // the dataset, or a sample of it, cannot be read as asked: missing, malformed, changed
  io,                  // an operating-system call failed (EIO, EMFILE, fork's EAGAIN, ...): it may pass
  shm,                 // not enough shared memory for the ring (the message says how much and what to raise)
  worker_died,         // worker processes died more often than Options::max_respawns allows
  worker_stuck,        // a worker made no progress within Options::timeout
  slots_held,          // every slot is held by live batches: release some
  device,              // the CUDA driver or device failed, or there is none
  state_mismatch,      // a LoaderState of another loader or dataset, or of a finished epoch
  interrupted,         // the loader was shut down or interrupted while it waited
  wrong_process,       // a Loader used in a process other than the one that built it (after fork)
  internal,            // a broken invariant of stoker's own: please report it
  transform,           // the user's transform (Options::transform) raised, or returned what it did not declare
};

// The code a number read from another process stands for (a slot's header, a child's answer, an
// exit report), or ErrorCode::internal for a number that names none (a negative one sent signed
// and cast reads as a huge one: internal too): the one place the wire's range is checked.
STOKER_API ErrorCode error_code_from_wire(std::uint64_t code) noexcept;

// "invalid_option", "dataset", ...
STOKER_API std::string_view error_code_name(ErrorCode code) noexcept;

class STOKER_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  // For user code, such as a pipeline operation (stoker/pipeline.h) that cannot process a sample:
  // ErrorCode::dataset.
  explicit Error(const std::string& message) : Error(ErrorCode::dataset, message) {}

  ErrorCode code() const noexcept { return code_; }

  // "<context>: <strerror(err)> (<ENAME>)", as the failure of an operating-system call.
  static Error from_errno(int err, const std::string& context, ErrorCode code = ErrorCode::io);

 private:
  ErrorCode code_;
};

// What printable() is given: a name, or a whole message whose names are printable already.
enum class Printable : std::uint8_t {
  name,     // a backslash is doubled, so that two names never print alike
  message,  // a backslash is kept, so that the names in it are not escaped twice
};

// Text from outside stoker (a field or dataset name read from a file, a file name found in a
// directory, a library's message) as stoker prints it and builds it into messages: printable UTF-8
// unchanged; each control character (C0, DEL, C1: \0, \n, \r, \t, \x1b, \u0085), Unicode line and
// paragraph separator and invisible or bidirectional format character (\u202e) escaped, and each
// byte that is not UTF-8 written \xNN. No name can then clear a terminal, move its cursor, start a
// line of its own or reorder the text around it.
STOKER_API std::string printable(std::string_view text, Printable what = Printable::name);

}  // namespace stoker
