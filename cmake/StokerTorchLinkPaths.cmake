# PyPI's torch wheel finds its CUDA libraries (NCCL, cuDNN, cuBLAS, ...) in sibling nvidia/*/lib
# packages through its RUNPATH. The linker resolves those indirect dependencies itself and must be
# told where they are, or it picks an older copy from the system (or none). Used by the build tree
# and by the installed stokerConfig.cmake, each with the LibTorch it found, so that no path of the
# machine stoker was built on ends up in the installed package.
function(stoker_torch_link_paths target torch_prefix)
  file(GLOB dirs LIST_DIRECTORIES true "${torch_prefix}/../nvidia/*/lib")
  get_target_property(imported ${target} IMPORTED)
  foreach(dir IN LISTS dirs)
    if(imported)
      set_property(TARGET ${target} APPEND PROPERTY INTERFACE_LINK_OPTIONS "LINKER:-rpath-link,${dir}")
    else()
      target_link_options(${target} PUBLIC "$<BUILD_INTERFACE:LINKER:-rpath-link,${dir}>")
    endif()
  endforeach()
endfunction()
