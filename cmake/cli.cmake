# The dflc driver: links every area's library that exists.
set(DFL_CLI_LIBS)
foreach(l dfl_cuda dfl_models dfl_plan dfl_ir dfl_io dfl_front)
  if(TARGET ${l})
    list(APPEND DFL_CLI_LIBS ${l})
  endif()
endforeach()
add_executable(dflc compiler/dflc.c)
target_link_libraries(dflc PRIVATE ${DFL_CLI_LIBS} m)
