// Libraries of pipeline operations (Options::op_libraries): shared libraries whose
// STOKER_REGISTER_OP operations register as they load. Loaded in the loader's process before its
// pipelines are built, and in an exec'd fork server before it builds them (forked workers have
// them already). A library stays loaded for the process's life: its operations stay registered.
#pragma once

#include <string>
#include <vector>

namespace stoker::detail {

// Loads each library not loaded by this function before (dlopen, RTLD_NOW | RTLD_GLOBAL). Throws
// stoker::Error (ErrorCode::invalid_option) naming the library: one that cannot be loaded
// (dlerror()'s text), one that registers no operation, one whose registration fails (a name taken).
// Not synchronised with Loaders building pipelines in other threads, like register_op.
void load_op_libraries(const std::vector<std::string>& paths);

}  // namespace stoker::detail
