# Static memory plan, reports (table, YAML, HTML), plan checker, and `dflc plan`.
# dfl_plan_core needs only the IR; dfl_plan adds the command, which builds graphs from a spec
# (dfl_models, dfl_front). Tests of the planner itself link the core only.
add_library(dfl_plan_core STATIC
  compiler/plan.c
  compiler/plan_recompute.c
  compiler/plan_report.c)
target_link_libraries(dfl_plan_core PUBLIC dfl_ir ${YAML_LIB})

add_library(dfl_plan STATIC compiler/cmd_plan.c)
target_link_libraries(dfl_plan PUBLIC dfl_plan_core dfl_models dfl_front)

dfl_add_test(plan_place SOURCES tests/plan/test_place.c LIBS dfl_plan_core LABELS plan)
# Registered once their source exists, so the configure never breaks midway.
foreach(t planned_cpu lce)
  if(EXISTS ${CMAKE_SOURCE_DIR}/tests/plan/test_${t}.c)
    dfl_add_test(plan_${t} SOURCES tests/plan/test_${t}.c LIBS dfl_plan_core LABELS plan)
  endif()
endforeach()
foreach(t examples report)
  if(EXISTS ${CMAKE_SOURCE_DIR}/tests/plan/test_${t}.c)
    dfl_add_test(plan_${t} SOURCES tests/plan/test_${t}.c LIBS dfl_plan LABELS plan)
  endif()
endforeach()

# The CLI error-path test (tests/cli/test_cli.sh) is registered here until CMakeLists.txt includes
# cmake/cli_tests.cmake itself (it has an include guard, so both may include it).
include(${CMAKE_SOURCE_DIR}/cmake/cli_tests.cmake)
