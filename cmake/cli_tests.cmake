# The dflc command line as a user meets it: every command with no arguments, --help, unknown
# options, options missing their value, and wrong inputs (missing file, directory, binary file,
# empty file) must exit 2 (usage) or 1 (bad input) with a message, never crash (tests/cli/).
include_guard(GLOBAL)
add_test(NAME cli_errors COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cli/test_cli.sh $<TARGET_FILE:dflc>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_errors PROPERTIES LABELS cli ENVIRONMENT "${DFL_TEST_ENV}" TIMEOUT 600)

# JSON written by dflc (build.json and `dflc train DIR`, bench --json, eval's result line) for a
# spec whose path needs escaping; a damaged build.json refused with its file:line:col.
add_executable(json_get tests/cli/json_get.c)
target_link_libraries(json_get PRIVATE ${JANSSON_LIB})
add_test(NAME cli_json_paths COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cli/test_json_paths.sh $<TARGET_FILE:dflc>
         $<TARGET_FILE:json_get> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_json_paths PROPERTIES LABELS cli ENVIRONMENT "${DFL_TEST_ENV}" TIMEOUT 600)
if(TEST cuda_nvrtc)   # its `dflc build` copies the run's kernel library (cmake/cuda.cmake)
  set_tests_properties(cli_json_paths PROPERTIES FIXTURES_REQUIRED nvrtc_library)
endif()

# `dflc train DIR` runs what `dflc build` wrote there (build.json's fingerprints of the graph, plan and
# kernel library) or refuses: an edited spec, another plan or kernel library, an older build.json.
add_test(NAME cli_build_dir COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cli/test_build_dir.sh $<TARGET_FILE:dflc>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_build_dir PROPERTIES LABELS "cli;cuda" ENVIRONMENT "${DFL_TEST_ENV}" TIMEOUT 600)
if(TEST cuda_nvrtc)   # its `dflc build` copies the run's kernel library (cmake/cuda.cmake)
  set_tests_properties(cli_build_dir PROPERTIES FIXTURES_REQUIRED nvrtc_library)
else()
  set_tests_properties(cli_build_dir PROPERTIES LABELS cli)
endif()

# A GPU device without memory_budget planned against its card's memory (`dflc plan --gpu NAME`): the 5 + 3
# example on eight 96 GB cards, a card too small, the spec's budget first, an unknown card.
add_test(NAME cli_plan_gpu COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cli/test_plan_gpu.sh $<TARGET_FILE:dflc>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_plan_gpu PROPERTIES LABELS cli ENVIRONMENT "${DFL_TEST_ENV}" TIMEOUT 300)

# What `dflc check` finds beyond the spec (weights' headers, shards, the memory plan, the run
# directory) with golden stderr, and `dflc train` refusing the same (NaN weights at load,
# a plan over budget unless --over-budget).
add_test(NAME cli_check_deep COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cli/test_check_deep.sh $<TARGET_FILE:dflc>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_check_deep PROPERTIES LABELS cli ENVIRONMENT "${DFL_TEST_ENV}" TIMEOUT 600)

# What a user watching `dflc train` sees: elapsed and ETA, the last lines (where the drafter is,
# what to run next), metrics.jsonl after a resume, line-buffered output, a NaN loss explained,
# an allocation failure with its bytes and the plan's parts.
add_test(NAME cli_train_ux COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cli/test_train_ux.sh $<TARGET_FILE:dflc>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_train_ux PROPERTIES LABELS cli ENVIRONMENT "${DFL_TEST_ENV}" TIMEOUT 900)

# One ctest naming scheme (docs/testing.md): every test is <stage>_<name>, the stage being its folder
# under tests/ (tests/train/test_train_nano.c -> train_nano, tests/io/test_data.c -> io_data), so
# `ctest -R train_` selects a room and a name says where its source is. Checked here, after every
# room has registered its tests, so a test named otherwise fails the configure step rather than
# drifting. nvrtc_cache_clear (cmake/cuda.cmake) is the one exception left to rename.
get_property(dfl_named_tests DIRECTORY PROPERTY TESTS)
file(GLOB dfl_test_stages LIST_DIRECTORIES true RELATIVE ${CMAKE_SOURCE_DIR}/tests ${CMAKE_SOURCE_DIR}/tests/*)
string(REPLACE ";" "|" dfl_test_stages "${dfl_test_stages}")
set(dfl_misnamed)
foreach(t ${dfl_named_tests})
  if(NOT t MATCHES "^(${dfl_test_stages})_[a-z0-9_]+$" AND NOT t STREQUAL nvrtc_cache_clear)
    list(APPEND dfl_misnamed ${t})
  endif()
endforeach()
if(dfl_misnamed)
  message(FATAL_ERROR "tests not named <stage>_<name> (stage: a folder under tests/; docs/testing.md): ${dfl_misnamed}")
endif()
