# Installs the build tree into a scratch prefix, then configures, builds and runs a consumer
# project against it with find_package(stoker).
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DSCRATCH=... -P run.cmake
file(REMOVE_RECURSE "${SCRATCH}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${SCRATCH}/prefix")
set(flags "")
if(SANITIZE)
  # A sanitized libstoker needs the consumer to load the sanitizer runtimes first.
  set(flags "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined")
endif()
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install" -B "${SCRATCH}/build" -DCMAKE_PREFIX_PATH=${SCRATCH}/prefix ${flags})
run(${CMAKE_COMMAND} --build "${SCRATCH}/build")
run("${SCRATCH}/build/consumer")
if(NOT last_output MATCHES "stoker::Error: /nonexistent/train.lmdb: No such file")
  message(FATAL_ERROR "unexpected output from the consumer: ${last_output}")
endif()
file(REMOVE_RECURSE "${SCRATCH}")
