# runtime/backend*.c: the device interface the trainer drives (the CPU backend always, the CUDA
# one when the toolkit is there), and runtime/train/: the training loop, evaluation, checkpoint
# cadence and export of a run.
add_library(dfl_train STATIC runtime/backend.c runtime/backend_cuda.c runtime/compile.c runtime/train/train.c runtime/train/train_eval.c
            runtime/train/train_run.c runtime/train/train_export.c
            runtime/train/accept.c)
target_link_libraries(dfl_train PUBLIC dfl_models dfl_io dfl_cpu dfl_plan_core dfl_front ${JANSSON_LIB} m
                      Threads::Threads)
if(TARGET dfl_cuda)
  target_link_libraries(dfl_train PUBLIC dfl_cuda)
endif()

# The training loop's tests (tests/train/).
foreach(t train_resume train_best train_baddata train_nano train_overlap)
  dfl_add_test(${t} SOURCES tests/train/test_${t}.c LIBS dfl_cli LABELS train)
endforeach()
add_dependencies(train_nano dflc)   # it runs `dflc export` and `dflc eval`
# More than about 15 s of training on 2 cores: the slow tier (docs/testing.md). Labelled here, beside
# the registration, so the label follows the test's name (CMakeLists.txt's DFL_SLOW_TESTS names them too).
set_property(TEST train_nano train_best APPEND PROPERTY LABELS slow)
# The greedy decoder's walk (runtime/train/accept.c) on planted drafters: no graph, milliseconds.
dfl_add_test(train_accept SOURCES tests/train/test_train_accept.c LIBS dfl_train LABELS train)
# The walk through the real eval graph after 50 steps of examples/nano.dfl, and `dflc eval` on it.
dfl_add_test(train_accept_nano SOURCES tests/train/test_train_accept_nano.c LIBS dfl_cli LABELS train)
add_dependencies(train_accept_nano dflc)
set_tests_properties(train_accept_nano PROPERTIES TIMEOUT 600)
set_property(TEST train_accept_nano APPEND PROPERTY LABELS slow)   # 30 s or more: the slow tier
# `dflc bench --drafter-only` on the CPU: a nano drafter alone, and the 27B one refused.
add_test(NAME train_bench_drafter COMMAND bash ${CMAKE_SOURCE_DIR}/tests/train/test_bench_drafter.sh
         $<TARGET_FILE:dflc> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(train_bench_drafter PROPERTIES LABELS train ENVIRONMENT "${DFL_TEST_ENV}" TIMEOUT 120)
