# libstoker.so exports the public API (include/stoker/) and the tools' internal API
# (docs/internal-api.md), and nothing else of stoker's: a new internal symbol that leaks out, or a
# tools API that grows without being documented, fails here.
#   cmake -DLIBRARY=libstoker.so -P exported_symbols.cmake
execute_process(COMMAND nm -D --defined-only -C "${LIBRARY}" OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${LIBRARY}")
endif()
set(allowed
  # The public API.
  "^stoker::(Batch|ContentDigest|OrderDigest|Device|DeviceStream|Epoch|Error|Field|Loader|LoaderState|Schema|Shard|SampleOut|SampleRandom|SampleTransform|SampleSink|StartedHost)(::|$)"
  "^stoker::(digest_hex|dtype_name|dtype_size|error_code_name|error_code_from_wire|parse_dtype|printable|set_option_spelling|version|operator<<|register_op|check_pipeline|init|clean_workers|set_worker_executable|worker_executable|serve_transform_host)$"
  # The tools' internal API (docs/internal-api.md).
  "^stoker::formats::(Reader|Hdf5Reader|Hdf5Writer|LmdbReader|LmdbWriter|VarBytes|Resizer)(::|$)"
  "^stoker::formats::(detect_format|lmdb_stored_schema|write_npy|image_info|plan_decode|decode_region|encode_jpeg|is_shard_set|shard_paths|resolve_source)$")
string(REPLACE "\n" ";" lines "${out}")
set(count 0)
set(leaked "")
foreach(line IN LISTS lines)
  if(NOT line MATCHES "stoker::")
    continue()  # the standard library's and Boost's template instances: not stoker's API
  endif()
  string(REGEX REPLACE "^[0-9a-f]+ [A-Za-z] " "" name "${line}")
  string(REGEX REPLACE "^(typeinfo name for|typeinfo for|vtable for|VTT for|guard variable for) " "" name "${name}")
  if(NOT name MATCHES "^stoker::")
    continue()  # e.g. a std:: template instantiated for a stoker type
  endif()
  string(REGEX REPLACE "\\(.*" "" name "${name}")
  string(REPLACE "[abi:cxx11]" "" name "${name}")
  math(EXPR count "${count} + 1")
  set(ok FALSE)
  foreach(pattern IN LISTS allowed)
    if(name MATCHES "${pattern}")
      set(ok TRUE)
      break()
    endif()
  endforeach()
  if(NOT ok)
    list(APPEND leaked "${name}")
  endif()
endforeach()
if(count LESS 20)
  message(FATAL_ERROR "only ${count} stoker symbols exported from ${LIBRARY}: is the public API marked STOKER_API?")
endif()
if(leaked)
  list(REMOVE_DUPLICATES leaked)
  string(REPLACE ";" "\n  " leaked "${leaked}")
  message(FATAL_ERROR "libstoker exports symbols that are neither public nor the documented tools API:\n  ${leaked}")
endif()
message(STATUS "${count} exported stoker symbols, all public or documented tools API")
