# Warnings and sanitizers for stoker's own targets (never for third-party code).
function(stoker_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor)
  if(STOKER_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

if(STOKER_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
