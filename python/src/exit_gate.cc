#include "exit_gate.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace stoker_py {

namespace nb = nanobind;
namespace {

// How the threads inside stoker meet the interpreter's exit. Once the interpreter is finalizing,
// Python ends a thread that takes the GIL (pthread_exit up to 3.13), also where it takes it back
// inside a call into Python that stoker's code makes (numpy's from_dlpack, the warnings module):
// unwinding through stoker's C++ frames reaches a noexcept one and aborts the process
// (std::terminate). So every call into the binding runs inside an Inside guard, and a thread
// inside stoker is counted while it holds the GIL or is about to take it back (GilRelease,
// keep_building). The package's atexit handler (atexit runs before finalizing starts, when only
// daemon threads are left) calls at_exit(): from then on a thread that would take the GIL inside
// stoker, entering or coming back from a wait, does not but waits for the process to end (it holds
// nothing then); and at_exit() lets go of the GIL until no thread is counted, so that those that
// hold it leave stoker or reach a wait first. A thread in a long wait (for workers that will never
// answer) does not hold the exit up: it parks when the wait returns. The thread that runs at_exit
// (the one that finalizes) goes on as usual. Atomics only, constant-initialized: a fork() child
// starts afresh (reset in the child, by pthread_atfork).
struct ExitGate {
  std::atomic<int> holding{0};  // threads inside stoker that hold the GIL or are taking it back
  std::atomic<bool> exiting{false};
  std::atomic<pthread_t> finalizer{};  // the thread that called at_exit()

  // Before this thread takes (or keeps) the GIL inside stoker: false when it must not (it is to
  // park), true when it may, and must then call release() when it no longer holds the GIL.
  bool hold() noexcept {
    holding.fetch_add(1);  // seq_cst with at_exit's store of `exiting`: one of the two sees the other
    if (parks_this_thread()) {
      holding.fetch_sub(1);
      return false;
    }
    return true;
  }
  void release() noexcept { holding.fetch_sub(1); }
  bool parks_this_thread() const noexcept { return exiting.load() && !pthread_equal(finalizer.load(), pthread_self()); }
};

constinit ExitGate g_gate;  // never destroyed while threads may wait in it: trivially destructible

}  // namespace

void park_until_the_process_ends() noexcept {
  for (;;) ::pause();
}
bool gate_hold() noexcept { return g_gate.hold(); }
void gate_release() noexcept { g_gate.release(); }

Inside::Inside() noexcept {
  if (!g_gate.hold()) {
    (void)PyEval_SaveThread();  // a daemon thread calling stoker while the interpreter exits
    park_until_the_process_ends();
  }
}

Inside::~Inside() {
  g_gate.release();
  if (g_gate.parks_this_thread()) {
    (void)PyEval_SaveThread();
    park_until_the_process_ends();
  }
}

GilRelease::GilRelease() noexcept : state_(PyEval_SaveThread()) { g_gate.release(); }

GilRelease::~GilRelease() {
  if (!g_gate.hold()) park_until_the_process_ends();
  PyEval_RestoreThread(state_);
}

void at_exit() {
  g_gate.finalizer.store(pthread_self());
  g_gate.exiting.store(true);
  PyThreadState* state = PyEval_SaveThread();  // threads that hold it inside stoker go on to leave or wait
  while (g_gate.holding.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  PyEval_RestoreThread(state);
}

void reset_gate_in_child() noexcept {
  g_gate.holding.store(0);
  g_gate.exiting.store(false);
}

bool keep_building() {
  if (!g_gate.hold()) return false;
  struct Released {
    ~Released() { g_gate.release(); }
  } released;
  nb::gil_scoped_acquire acquire;
  if (PyErr_CheckSignals() != 0) throw nb::python_error();
  return true;
}

}  // namespace stoker_py
