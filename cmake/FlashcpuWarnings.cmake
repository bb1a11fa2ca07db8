# Warning flags for every flashcpu target: flashcpu_set_warnings(<target>).
function(flashcpu_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow
                         $<$<COMPILE_LANGUAGE:C>:-Wstrict-prototypes>)
  if(FLASHCPU_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
