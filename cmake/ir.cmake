# compiler/: graph IR, autodiff, optimizer nodes, fusion, schedule.
add_library(dfl_ir STATIC
  compiler/graph.c
  compiler/graph_validate.c
  compiler/autodiff.c
  compiler/optim.c
  compiler/fuse.c
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
