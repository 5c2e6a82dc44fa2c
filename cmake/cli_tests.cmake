# The dflc command line as a user meets it: every command with no arguments, --help, unknown
# options, options missing their value, and wrong inputs (missing file, directory, binary file,
# empty file) must exit 2 (usage) or 1 (bad input) with a message, never crash (tests/cli/).
include_guard(GLOBAL)
add_test(NAME cli_errors COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cli/test_cli.sh $<TARGET_FILE:dflc>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_errors PROPERTIES LABELS cli ENVIRONMENT "${DFL_TEST_ENV}" TIMEOUT 600)
