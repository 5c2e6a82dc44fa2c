# Graph builders (target, DFlash drafter), weight binding, `dflc verify`, and the training loop
# and checkpoints (runtime/train*.c, runtime/checkpoint*.c, globbed in when present).
file(GLOB DFL_MODELS_SRC CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/models/*.c
  ${CMAKE_SOURCE_DIR}/runtime/train*.c
  ${CMAKE_SOURCE_DIR}/runtime/checkpoint*.c
  ${CMAKE_SOURCE_DIR}/runtime/cmd_train.c)
add_library(dfl_models STATIC ${DFL_MODELS_SRC})
foreach(l dfl_plan dfl_ir dfl_io dfl_front)
  if(TARGET ${l})
    target_link_libraries(dfl_models PUBLIC ${l})
  endif()
endforeach()
target_link_libraries(dfl_models PUBLIC ${JANSSON_LIB} m)

# Tests need the IR (graph + CPU backend) and safetensors reading.
if(TARGET dfl_ir AND TARGET dfl_io)
  # Each test is registered once its source exists, so the configure never breaks midway.
  foreach(t target_golden weights verify_corrupt train_colocated)
    if(EXISTS ${CMAKE_SOURCE_DIR}/tests/models/test_${t}.c)
      dfl_add_test(test_models_${t} SOURCES tests/models/test_${t}.c LIBS dfl_models LABELS models)
    endif()
  endforeach()
  # `dflc verify` on both reference fixtures (the dflc target is defined later, in cli.cmake;
  # generator expressions resolve at generate time).
  foreach(fx dflash_step_public dflash_step_public_b)
    add_test(NAME models_verify_${fx}
             COMMAND $<TARGET_FILE:dflc> verify tests/fixtures/${fx}
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    add_test(NAME models_verify_${fx}_f64
             COMMAND $<TARGET_FILE:dflc> verify --f64 tests/fixtures/${fx}
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(models_verify_${fx} models_verify_${fx}_f64 PROPERTIES LABELS models
                         ENVIRONMENT "${DFL_TEST_ENV}")
  endforeach()
endif()

# The training loop (runtime/train.c, checkpoint.c, cmd_train.c): tests/train/.
if(TARGET dfl_ir AND TARGET dfl_io AND TARGET dfl_plan)
  foreach(t train_resume train_baddata train_nano)
    if(EXISTS ${CMAKE_SOURCE_DIR}/tests/train/test_${t}.c)
      dfl_add_test(test_${t} SOURCES tests/train/test_${t}.c LIBS dfl_models LABELS train)
    endif()
  endforeach()
  if(TARGET test_train_nano)
    add_dependencies(test_train_nano dflc)   # it runs `dflc export` and `dflc eval`
  endif()
endif()
