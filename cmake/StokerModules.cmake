# The library's modules (docs/architecture.md): one OBJECT library per folder, stoker_<folder with
# '/' as '_'> (loader/shm -> stoker_loader_shm). Its CMakeLists.txt lists its sources and the
# third-party libraries it uses; the modules it may use come from its row in docs/architecture.md's
# table, the one place the arrows are written, and become its link (and include) dependencies.
# libstoker and stoker_internal are made of every module's objects.

set(stoker_architecture ${PROJECT_SOURCE_DIR}/docs/architecture.md)
set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${stoker_architecture})
file(STRINGS ${stoker_architecture} stoker_architecture_rows ENCODING UTF-8 REGEX "^\\| `[a-z0-9_/]+` \\|")
foreach(row IN LISTS stoker_architecture_rows)
  string(REGEX MATCH "^\\| `([a-z0-9_/]+)` \\|" _ "${row}")
  set(module ${CMAKE_MATCH_1})
  string(REGEX REPLACE "^.*\\|([^|]*)\\|[ \t]*$" "\\1" uses "${row}")
  string(REGEX MATCHALL "`[a-z0-9_/]+`" uses "${uses}")
  string(REPLACE "`" "" uses "${uses}")
  set(STOKER_MODULE_USES_${module} "${uses}")
  list(APPEND stoker_architecture_modules ${module})
endforeach()

function(stoker_module_target module out)
  string(REPLACE "/" "_" name "${module}")
  set(${out} stoker_${name} PARENT_SCOPE)
endfunction()

# stoker_module(MODULE SOURCES file... [PUBLIC_LIBS target...] [PRIVATE_LIBS target...])
#   PUBLIC_LIBS: third-party libraries the module's headers expose (their users need them too).
function(stoker_module module)
  cmake_parse_arguments(M "" "" "SOURCES;PUBLIC_LIBS;PRIVATE_LIBS" ${ARGN})
  if(NOT module IN_LIST stoker_architecture_modules)
    message(FATAL_ERROR "stoker_module(${module}): docs/architecture.md's table has no row for module '${module}'")
  endif()
  stoker_module_target(${module} target)
  add_library(${target} OBJECT ${M_SOURCES})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                              $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
                                              $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  foreach(used IN LISTS STOKER_MODULE_USES_${module})
    stoker_module_target(${used} used_target)
    target_link_libraries(${target} PUBLIC ${used_target})
  endforeach()
  target_link_libraries(${target} PUBLIC ${M_PUBLIC_LIBS} PRIVATE ${M_PRIVATE_LIBS})
  # The public headers use C++20 (std::span).
  target_compile_features(${target} PUBLIC cxx_std_20)
  set_target_properties(${target} PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  stoker_warnings(${target})
  set_property(GLOBAL APPEND PROPERTY STOKER_MODULE_TARGETS ${target})
endfunction()
