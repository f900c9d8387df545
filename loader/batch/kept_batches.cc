#include "loader/batch/kept_batches.h"

#include "base/option_spelling.h"

namespace stoker::detail {

std::string kept_batches() {
  switch (option_spelling()) {
    case OptionSpelling::python: return "batches whose tensors or arrays are alive";
    case OptionSpelling::command_line: return "batches the program keeps";  // the tools keep none
    case OptionSpelling::cpp: break;
  }
  return "live stoker::Batch objects";
}

std::string let_batches_go() {
  switch (option_spelling()) {
    case OptionSpelling::python:
      return "delete the batches you no longer need (every tensor or array of them), pass copy=True for tensors of "
             "their own, or raise held_batches to the number of batches you keep";
    case OptionSpelling::command_line: return "let go of the batches no longer needed";
    case OptionSpelling::cpp: break;
  }
  return "destroy or release() the batches you no longer need, copy what you want to keep (e.g. "
         "stoker::copy_to_tensors), or raise Options::held_batches to the number of batches you keep";
}

}  // namespace stoker::detail
