# File formats and data: safetensors, JSONL data, RNG, anchors, drafter export.
add_library(dfl_io STATIC
  runtime/safetensors.c
  runtime/rng.c
  runtime/data.c
  runtime/packed.c
  runtime/cmd_pack.c
  runtime/anchors.c
  runtime/export.c)
target_link_libraries(dfl_io PUBLIC ${JANSSON_LIB} ${Z_LIB} m)

dfl_add_test(test_io_safetensors SOURCES tests/io/test_safetensors.c LIBS dfl_io LABELS io)
dfl_add_test(test_io_data SOURCES tests/io/test_data.c LIBS dfl_io LABELS io)
dfl_add_test(test_io_anchors SOURCES tests/io/test_anchors.c LIBS dfl_io LABELS io)
dfl_add_test(test_io_export SOURCES tests/io/test_export.c LIBS dfl_io LABELS io)
dfl_add_test(test_io_packed SOURCES tests/io/test_packed.c LIBS dfl_io LABELS io)
# Training on packed data: needs the trainer (dfl_models, defined later; resolved at generate time).
dfl_add_test(test_io_packed_train SOURCES tests/io/test_packed_train.c LIBS dfl_models LABELS "io;train")

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
