# compiler/: graph IR, autodiff, optimizer nodes, fusion, schedule.
add_library(dfl_ir STATIC
  compiler/graph.c
  compiler/ir.c
  compiler/graph_validate.c
  compiler/autodiff.c
  compiler/optim.c
  compiler/fuse.c
  compiler/lower.c
  compiler/sched.c
  compiler/file.c)
target_link_libraries(dfl_ir PUBLIC m)

# runtime/cpu/: the CPU reference backend (the f32 and f64 interpreters of one source).
add_library(dfl_cpu STATIC
  runtime/cpu/cpu.c
  runtime/cpu/cpu_f32.c
  runtime/cpu/cpu_f64.c)
target_link_libraries(dfl_cpu PUBLIC dfl_ir ${OPENBLAS_LIB} m Threads::Threads)

dfl_add_test(ir_graph SOURCES tests/ir/test_graph.c LIBS dfl_cpu LABELS ir)
dfl_add_test(ir_grad SOURCES tests/ir/test_grad.c LIBS dfl_cpu LABELS ir)
dfl_add_test(ir_attention SOURCES tests/ir/test_attention.c LIBS dfl_cpu LABELS ir)
dfl_add_test(ir_ops SOURCES tests/ir/test_ops.c LIBS dfl_cpu LABELS ir)
dfl_add_test(ir_optim SOURCES tests/ir/test_optim.c LIBS dfl_cpu LABELS ir)
dfl_add_test(ir_planned SOURCES tests/ir/test_planned.c LIBS dfl_cpu LABELS ir)
dfl_add_test(ir_fuse SOURCES tests/ir/test_fuse.c LIBS dfl_cpu LABELS ir)
dfl_add_test(ir_fp8 SOURCES tests/ir/test_fp8.c LIBS dfl_cpu LABELS ir)
dfl_add_test(ir_hybrid_ops SOURCES tests/ir/test_hybrid_ops.c LIBS dfl_cpu LABELS ir)
# The op table: every opcode of compiler/ops.def has a CPU forward case against an f64 reference and,
# when differentiable, a finite-difference gradient case, or ir_op_table fails naming it. The cases
# are the files' own (tests/ir/op_table.h); DFL_OP_TABLE turns their main off. dfl_cpu_init is
# wrapped to record the ops each case runs. The _drop tests check the walk itself: a row or a
# gradient case taken away must be reported.
dfl_add_test(ir_op_table SOURCES tests/ir/test_op_table.c tests/ir/test_ops.c tests/ir/test_grad.c
             tests/ir/test_attention.c tests/ir/test_fp8.c tests/ir/test_optim.c tests/ir/test_hybrid_ops.c
             LIBS dfl_cpu LABELS ir)
target_compile_definitions(ir_op_table PRIVATE DFL_OP_TABLE)
target_link_options(ir_op_table PRIVATE -Wl,--wrap=dfl_cpu_init)
add_test(NAME ir_op_table_drop COMMAND ir_op_table --drop swiglu WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
add_test(NAME ir_op_table_drop_grad COMMAND ir_op_table --drop-grad rope WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(ir_op_table_drop ir_op_table_drop_grad PROPERTIES LABELS ir ENVIRONMENT "${DFL_TEST_ENV}")
