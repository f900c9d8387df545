// How the threads inside stoker meet the interpreter's exit: the gate every call into the binding
// passes (Inside), the GIL let go for a wait or a copy (GilRelease), and what the package's atexit
// handler calls. Why it is needed, and how it works: ExitGate in exit_gate.cc.
#pragma once

#include <nanobind/nanobind.h>

namespace stoker_py {

// Around every call into the binding (nb::call_guard), entered with the GIL.
struct Inside {
  Inside() noexcept;
  // Once the interpreter exits, a daemon thread does not go back to nanobind's code around the call
  // (which may run Python code: a collection when it allocates), but parks here.
  ~Inside();
  Inside(const Inside&) = delete;
  Inside& operator=(const Inside&) = delete;
};

// The GIL released for a wait or a copy, inside an Inside.
class GilRelease {
 public:
  GilRelease() noexcept;
  ~GilRelease();
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* state_;
};

// The package's atexit handler's: see ExitGate. Called with the GIL, outside any Inside.
void at_exit();
// In a fork() child (pthread_atfork): the gate as it is at start.
void reset_gate_in_child() noexcept;
// Whether construction goes on (called with the GIL released, inside the constructor's
// GilRelease): the constructing thread sees Ctrl-C (PyErr_CheckSignals runs the signal handlers, on
// the main thread), and stops once the interpreter exits.
bool keep_building();

// Before this thread takes the GIL inside stoker, having released it: whether it may (see
// ExitGate); if so, gate_release() once it no longer holds it.
bool gate_hold() noexcept;
void gate_release() noexcept;
[[noreturn]] void park_until_the_process_ends() noexcept;

}  // namespace stoker_py
