// What stoker::init() saw (stoker/init.h): the program's arguments, with which a fork server is
// started by exec of the program itself, and so whether workers start from a clean image.
// Written once, by init() at the start of main(), before any Loader exists; read after.
#pragma once

#include <string>
#include <vector>

namespace stoker::detail {

// Records argv; from then on workers start from a fresh exec of the program.
void record_program_arguments(int argc, char** argv);
// The arguments init() saw (argv[0] first); empty before init().
const std::vector<std::string>& program_arguments() noexcept;
// Whether init() has run in this process.
bool program_initialised() noexcept;

}  // namespace stoker::detail
