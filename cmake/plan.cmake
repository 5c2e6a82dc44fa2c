# compiler/plan*.c: the static memory plan, its reports (table, YAML, HTML) and the plan checker.
# It needs only the IR; `dflc plan` (runtime/cli/cmd_plan.c) builds graphs from a spec on top.
add_library(dfl_plan_core STATIC
  compiler/plan.c
  compiler/plan_recompute.c
  compiler/plan_report.c)
target_link_libraries(dfl_plan_core PUBLIC dfl_ir ${YAML_LIB})

dfl_add_test(plan_place SOURCES tests/plan/test_place.c LIBS dfl_plan_core LABELS plan)
dfl_add_test(plan_planned_cpu SOURCES tests/plan/test_planned_cpu.c LIBS dfl_plan_core dfl_cpu LABELS plan)
dfl_add_test(plan_lce SOURCES tests/plan/test_lce.c LIBS dfl_plan_core LABELS plan)
# `dflc plan` on every example (the dflc target comes from cli.cmake)
dfl_add_test(plan_examples SOURCES tests/plan/test_examples.c LIBS dfl_plan_core LABELS plan)
# compiler/lower.c: the pointwise fusion groups, and the plan's liveness over them
dfl_add_test(ir_lower SOURCES tests/ir/test_lower.c LIBS dfl_plan_core LABELS ir)
