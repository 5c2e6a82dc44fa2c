# Front end: grammar (flex + bison), diagnostics, checker, config.json reading -> dfl_spec.
# Owned by the front-end work; see docs/language.md.
bison_target(dfl_parser ${CMAKE_SOURCE_DIR}/grammar/dfl.y ${CMAKE_BINARY_DIR}/dfl.tab.c
             DEFINES_FILE ${CMAKE_BINARY_DIR}/dfl.tab.h)
flex_target(dfl_scanner ${CMAKE_SOURCE_DIR}/grammar/dfl.l ${CMAKE_BINARY_DIR}/dfl.lex.c)
add_flex_bison_dependency(dfl_scanner dfl_parser)
# Generated code is not held to -Wextra (flex emits unused-function noise).
set_source_files_properties(${BISON_dfl_parser_OUTPUTS} ${FLEX_dfl_scanner_OUTPUTS}
                            PROPERTIES COMPILE_OPTIONS "-Wno-unused-function;-Wno-sign-compare")

add_library(dfl_front STATIC
  compiler/diag.c compiler/ast.c compiler/hfconfig.c compiler/check.c compiler/check_model.c compiler/check_train.c
  compiler/check_schema.c compiler/check_topology.c
  ${BISON_dfl_parser_OUTPUTS} ${FLEX_dfl_scanner_OUTPUTS})
target_link_libraries(dfl_front PUBLIC dfl_ir ${JANSSON_LIB} m)

dfl_add_test(front_unit SOURCES tests/front/test_front_unit.c LIBS dfl_front)
add_test(NAME front_golden COMMAND bash ${CMAKE_SOURCE_DIR}/tests/front/run_golden.sh $<TARGET_FILE:dflc>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
add_test(NAME front_docs COMMAND bash ${CMAKE_SOURCE_DIR}/tests/front/check_docs.sh $<TARGET_FILE:dflc>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(front_golden front_docs PROPERTIES ENVIRONMENT "${DFL_TEST_ENV}")
# A short libFuzzer run when clang is installed (scripts/setup.sh installs it); it compiles the
# harness itself, so the main build may use any compiler.
find_program(DFL_CLANG clang)
if(DFL_CLANG)
  add_test(NAME front_fuzz COMMAND bash ${CMAKE_SOURCE_DIR}/tests/fuzz/run.sh ${CMAKE_BINARY_DIR} 45
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(front_fuzz PROPERTIES ENVIRONMENT "${DFL_TEST_ENV};CLANG=${DFL_CLANG}" TIMEOUT 300
                       LABELS fuzz)
endif()
