# runtime/pipeline/: the multi-device runner, the hidden-state queue, the all-reduce (CPU threads;
# NCCL through dlopen), launcher discovery and the per-device monitor. Built on the trainer.
add_library(dfl_pipeline STATIC
  runtime/pipeline/pipeline.c
  runtime/pipeline/pipeline_base.c
  runtime/pipeline/pipeline_feed.c
  runtime/pipeline/pipeline_replica.c
  runtime/pipeline/pipeline_report.c
  runtime/pipeline/pipeline_setup.c
  runtime/pipeline/queue.c
  runtime/pipeline/topo.c
  runtime/pipeline/collective.c
  runtime/pipeline/launch.c
  runtime/pipeline/monitor.c)
target_link_libraries(dfl_pipeline PUBLIC dfl_train Threads::Threads ${CMAKE_DL_LIBS} m)
# GPU devices (pipeline_gpu.c: device queue slots, events) when the CUDA backend is built.
if(TARGET dfl_cuda)
  target_sources(dfl_pipeline PRIVATE runtime/pipeline/pipeline_gpu.c)
endif()
# nccl.h only to check the few NCCL types collective.c declares itself; never linked.
find_path(DFL_NCCL_INCLUDE nccl.h PATHS /usr/local/cuda/include /usr/include NO_DEFAULT_PATH)
if(DFL_NCCL_INCLUDE)
  set_source_files_properties(${CMAKE_SOURCE_DIR}/runtime/pipeline/collective.c PROPERTIES
                              INCLUDE_DIRECTORIES ${DFL_NCCL_INCLUDE})
endif()

foreach(t queue collective launch monitor topo pipeline_equiv pipeline_faults pipeline_mixed pipeline_kd
        pipeline_resume)
  if(EXISTS ${CMAKE_SOURCE_DIR}/tests/pipeline/test_${t}.c)
    string(REGEX REPLACE "^pipeline_" "" n ${t})   # test_pipeline_equiv.c -> pipeline_equiv
    dfl_add_test(pipeline_${n} SOURCES tests/pipeline/test_${t}.c LIBS dfl_pipeline LABELS pipeline)
  endif()
endforeach()
# Three end-of-run evaluations, 20 s or more: the slow tier (docs/testing.md).
if(TEST pipeline_equiv)
  set_property(TEST pipeline_equiv APPEND PROPERTY LABELS slow)
endif()
# The bootstrap across real processes: mpirun -np 2 (SKIP 77 without mpirun) and two
# torchrun-style processes on 127.0.0.1.
dfl_add_test(pipeline_launch_mpi SOURCES tests/pipeline/test_launch_procs.c LIBS dfl_pipeline
             LABELS pipeline ARGS mpi)
add_test(NAME pipeline_launch_torchrun COMMAND $<TARGET_FILE:pipeline_launch_mpi> torchrun
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(pipeline_launch_torchrun PROPERTIES LABELS pipeline ENVIRONMENT "${DFL_TEST_ENV}"
                     TIMEOUT 90)
set_tests_properties(pipeline_launch_mpi PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 90)
# GPU (SKIP 77 without one): split target/drafter logical devices on one GPU vs the single-device
# GPU trainer, diagnostics, and 2 NCCL replicas in 2 processes on 2 GPUs. Static OpenBLAS, as
# dflc_gpu (the GPU machine has none).
if(TARGET dfl_cuda AND DFL_OPENBLAS_STATIC)
  dfl_add_test(pipeline_gpu SOURCES tests/pipeline/test_pipeline_gpu.c
               LIBS ${DFL_OPENBLAS_STATIC} dfl_pipeline dfl_cuda LABELS pipeline_gpu)
  target_link_options(pipeline_gpu PRIVATE -Wl,--as-needed -Wl,--undefined=cblas_sgemm
                      -Wl,--undefined=cblas_dgemm -Wl,--undefined=openblas_set_num_threads)
  set_tests_properties(pipeline_gpu PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
  # (f) 2 GPU replicas in one process (NCCL ncclCommInitAll), (g) target and drafter in 2 processes
  # (ncclSend/ncclRecv); SKIP 77 with fewer than 2 GPUs
  add_test(NAME pipeline_gpu_topo COMMAND $<TARGET_FILE:pipeline_gpu> --topo
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(pipeline_gpu_topo PROPERTIES LABELS pipeline_gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "${DFL_TEST_ENV}")
endif()
# `dflc check` and `dflc plan` accept the 2 target + 2 drafter example
foreach(cmd check plan)
  add_test(NAME pipeline_example_${cmd} COMMAND $<TARGET_FILE:dflc> ${cmd} examples/nano-pipeline.dfl
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(pipeline_example_${cmd} PROPERTIES LABELS pipeline ENVIRONMENT "${DFL_TEST_ENV}")
endforeach()
# and the mixed example (cpu0 colocated, cpu1 drafter-only fed by cpu2 target-only)
foreach(cmd check plan)
  add_test(NAME pipeline_example_mixed_${cmd} COMMAND $<TARGET_FILE:dflc> ${cmd} examples/nano-mixed.dfl
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(pipeline_example_mixed_${cmd} PROPERTIES LABELS pipeline ENVIRONMENT "${DFL_TEST_ENV}")
endforeach()
