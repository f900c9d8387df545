# Installs the build tree into a scratch prefix and uses it the way a user would:
#   - the installed tools run from the prefix with no environment set (RPATH, no LD_LIBRARY_PATH);
#   - the README's CMake snippet, extracted verbatim, builds a program that loads a dataset, and its
#     digests equal the installed loader-bench's;
#   - a consumer that sets CMAKE_CXX_STANDARD 20 itself and never asks for torch;
#   - with TORCH_DIR set, a consumer of find_package(stoker COMPONENTS torch).
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DSCRATCH=... [-DTORCH_DIR=...] [-DSANITIZE=ON] -P run.cmake
file(REMOVE_RECURSE "${SCRATCH}")
set(prefix "${SCRATCH}/prefix")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
# `env -i`: nothing from the test's environment (no LD_LIBRARY_PATH) helps the installed tools.
set(bare_env env -i PATH=/usr/bin:/bin)
if(SANITIZE)
  # A sanitized build leaks nothing, but LeakSanitizer cannot run under ptrace-like sandboxes.
  list(APPEND bare_env ASAN_OPTIONS=detect_leaks=0)
endif()

run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")

# The installed tools, with no environment.
run(${bare_env} "${prefix}/bin/loader-bench" --demo-samples 1000 --epochs 1)
if(NOT last_output MATCHES "samples/s")
  message(FATAL_ERROR "the installed loader-bench's demo printed no figures:\n${last_output}")
endif()
run(${bare_env} "${prefix}/bin/h5-to-lmdb" --help)
run(${bare_env} "${prefix}/bin/loader-bench" --make-demo "${SCRATCH}/data" --demo-samples 3000)
set(data "${SCRATCH}/data/demo.lmdb")
run(${bare_env} "${prefix}/bin/loader-bench" --data "${data}" --batch-size 64 --workers 2 --shuffle --seed 7
    --epochs 1 --digest --json)
string(JSON want_content GET "${last_output}" content_digest)
string(JSON want_order GET "${last_output}" order_digest)
set(want "samples 3000 content_digest ${want_content} order_digest ${want_order}")

set(flags "")
if(SANITIZE)
  # A sanitized libstoker needs the consumer to load the sanitizer runtimes first.
  set(flags "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined")
endif()

function(build_consumer name source_dir)
  run(${CMAKE_COMMAND} -S "${source_dir}" -B "${SCRATCH}/${name}-build" "-DCMAKE_PREFIX_PATH=${prefix}" ${flags} ${ARGN})
  run(${CMAKE_COMMAND} --build "${SCRATCH}/${name}-build")
endfunction()

# 1. The README's snippet, exactly as written there.
file(READ "${SOURCE_DIR}/README.md" readme)
string(REGEX MATCH "```cmake\n([^`]*find_package\\(stoker REQUIRED\\)[^`]*)```" snippet "${readme}")
if(NOT CMAKE_MATCH_1)
  message(FATAL_ERROR "README.md has no ```cmake block with find_package(stoker REQUIRED)")
endif()
file(WRITE "${SCRATCH}/readme/CMakeLists.txt" "${CMAKE_MATCH_1}")
file(COPY "${SOURCE_DIR}/tests/install/train.cc" DESTINATION "${SCRATCH}/readme")
build_consumer(readme "${SCRATCH}/readme")
run(${bare_env} "${SCRATCH}/readme-build/train" "${data}")
if(NOT last_output MATCHES "${want}")
  message(FATAL_ERROR "the README consumer delivered other data than loader-bench:\n  got  ${last_output}  want ${want}")
endif()
# ... and reports a bad path as stoker::Error.
execute_process(COMMAND "${SCRATCH}/readme-build/train" /nonexistent/train.lmdb RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "train: /nonexistent/train.lmdb: No such file")
  message(FATAL_ERROR "unexpected result for a missing dataset (${rc}): ${err}")
endif()

# 2. A consumer that sets the standard itself.
build_consumer(std20 "${SOURCE_DIR}/tests/install/std20")
run(${bare_env} "${SCRATCH}/std20-build/train" "${data}")
if(NOT last_output MATCHES "${want}")
  message(FATAL_ERROR "the std20 consumer delivered other data:\n  got  ${last_output}  want ${want}")
endif()

# 3. The LibTorch adapter through its component.
if(TORCH_DIR)
  build_consumer(torch "${SOURCE_DIR}/tests/install/torch" "-DTorch_DIR=${TORCH_DIR}")
  set(torch_env "")
  if(SANITIZE)
    # A sanitized link leaves libc10_cuda out of the program's own dependencies, and PyPI's
    # libtorch_cuda.so does not look for it beside itself (its RPATH names only the nvidia/ wheels).
    get_filename_component(torch_lib "${TORCH_DIR}/../../../lib" ABSOLUTE)
    set(torch_env env "LD_LIBRARY_PATH=${torch_lib}")
  endif()
  run(${torch_env} "${SCRATCH}/torch-build/train_torch" "${data}")
  if(NOT last_output MATCHES "torch samples 3000")
    message(FATAL_ERROR "the torch consumer: ${last_output}")
  endif()
endif()
file(REMOVE_RECURSE "${SCRATCH}")
message(STATUS "installed package: tools and consumers passed")
