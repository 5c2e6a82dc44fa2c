# runtime/io/: file formats and data: safetensors, JSONL and packed data, RNG, anchors, weights
# binding, checkpoints and the drafter export. Weights and checkpoints live in the CPU backend's
# host tensors (runtime/cpu/), the one room below this one.
add_library(dfl_io STATIC
  runtime/io/safetensors.c
  runtime/io/rng.c
  runtime/io/data.c
  runtime/io/dataset.c
  runtime/io/packed.c
  runtime/io/anchors.c
  runtime/io/export.c
  runtime/io/weights.c
  runtime/io/checkpoint.c
  runtime/io/checkpoint_run.c)
target_link_libraries(dfl_io PUBLIC dfl_cpu ${JANSSON_LIB} ${Z_LIB} m Threads::Threads)

dfl_add_test(io_safetensors SOURCES tests/io/test_safetensors.c LIBS dfl_io LABELS io)
dfl_add_test(io_data SOURCES tests/io/test_data.c LIBS dfl_io LABELS io)
dfl_add_test(io_anchors SOURCES tests/io/test_anchors.c LIBS dfl_io LABELS io)
dfl_add_test(io_export SOURCES tests/io/test_export.c LIBS dfl_io LABELS io)
dfl_add_test(io_packed SOURCES tests/io/test_packed.c LIBS dfl_io LABELS io)
# Training on packed data: needs the trainer (dfl_models, defined later; resolved at generate time).
dfl_add_test(io_packed_train SOURCES tests/io/test_packed_train.c LIBS dfl_train LABELS "io;train")

# Fuzzing (libFuzzer needs clang): each harness is built by a script and fuzzed for ~30 s.
find_program(DFL_IO_CLANG NAMES clang clang-14)
if(DFL_IO_CLANG)
  foreach(h safetensors jsonl)
    add_test(NAME io_fuzz_${h}
      COMMAND sh ${CMAKE_SOURCE_DIR}/tests/fuzz/io/run_fuzz.sh fuzz_${h} 30 ${CMAKE_SOURCE_DIR}
              ${CMAKE_BINARY_DIR}/fuzz-io ${DFL_IO_CLANG} ${JANSSON_LIB} ${Z_LIB}
      WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(io_fuzz_${h} PROPERTIES LABELS "io;fuzz" TIMEOUT 300)
  endforeach()
  # The packed reader: ~20 s (the format is small; the reseal in the harness reaches deep fast).
  add_test(NAME io_fuzz_packed
    COMMAND sh ${CMAKE_SOURCE_DIR}/tests/fuzz/io/run_fuzz.sh fuzz_packed 20 ${CMAKE_SOURCE_DIR}
            ${CMAKE_BINARY_DIR}/fuzz-io ${DFL_IO_CLANG} ${JANSSON_LIB} ${Z_LIB}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(io_fuzz_packed PROPERTIES LABELS "io;fuzz" TIMEOUT 300)
endif()

# scripts/dflc-prepare (conversations -> rows, Python: tokenizers + jinja2) end to end on nano, and
# dflc check/train on its rows; 77 (skipped) only where scripts/setup.sh could not install the two.
find_program(DFL_PYTHON3 NAMES python3)
if(DFL_PYTHON3)
  add_test(NAME io_prepare COMMAND ${DFL_PYTHON3} ${CMAKE_SOURCE_DIR}/tests/io/test_prepare.py $<TARGET_FILE:dflc>
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(io_prepare PROPERTIES LABELS io SKIP_RETURN_CODE 77 ENVIRONMENT "${DFL_TEST_ENV}")
endif()
# --regenerate against a real OpenAI-compatible server: `transformers serve` with nano on the CPU, a
# run checked against the server's replies and its request log, then a kill and resume (about 20 s,
# most of it the server's start). Fails, naming scripts/setup.sh --deps, where the server is not installed.
if(DFL_PYTHON3)
  add_test(NAME io_prepare_server COMMAND ${DFL_PYTHON3} ${CMAKE_SOURCE_DIR}/tests/io/test_prepare_server.py
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(io_prepare_server PROPERTIES LABELS "io;slow" TIMEOUT 600 ENVIRONMENT "${DFL_TEST_ENV}")
endif()
