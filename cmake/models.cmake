# models/: the graph builders (target families, the DFlash drafter, the per-device graphs of a
# pipeline). They turn a dfl_spec into dfl_graphs and depend on the compiler alone.
add_library(dfl_models STATIC models/target.c models/target_common.c models/target_hybrid.c models/drafter.c models/pipeline.c)
target_link_libraries(dfl_models PUBLIC dfl_ir m)

# Their tests run graphs with weights on the CPU backend, so they link the trainer's library
# (cmake/train.cmake, defined later; CMake resolves the name at generate time).
foreach(t target_golden hybrid_load weights verify_corrupt train_colocated grads_lowp block_rows)
  dfl_add_test(models_${t} SOURCES tests/models/test_${t}.c LIBS dfl_cli LABELS models)
endforeach()
# `dflc verify` on both reference fixtures (the dflc target is defined later, in cli.cmake).
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
# The same fixture checks under every OpenBLAS core type the CPU can run (the f32 step's rounding
# follows OpenBLAS's per-CPU kernels; tests/models/verify_coretypes.sh); 77: no DYNAMIC_ARCH.
add_test(NAME models_verify_coretypes
         COMMAND bash tests/models/verify_coretypes.sh $<TARGET_FILE:dflc>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(models_verify_coretypes PROPERTIES LABELS models SKIP_RETURN_CODE 77
                     ENVIRONMENT "${DFL_TEST_ENV}")
