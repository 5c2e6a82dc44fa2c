# runtime/cli/: every dflc command and the dflc driver, the top of the stack.
add_library(dfl_cli STATIC
  runtime/cli/cmd_check.c
  runtime/cli/cmd_plan.c
  runtime/cli/cmd_verify.c
  runtime/cli/cmd_golden.c
  runtime/cli/cmd_train.c
  runtime/cli/cmd_build.c
  runtime/cli/cmd_pack.c
  runtime/cli/cmd_bench.c
  runtime/cli/bench_ops.c
  runtime/cli/bench_target.c
  runtime/cli/power.c)
target_link_libraries(dfl_cli PUBLIC dfl_pipeline dfl_train ${CMAKE_DL_LIBS} m)
if(TARGET dfl_emit)
  target_link_libraries(dfl_cli PUBLIC dfl_emit)
endif()

add_executable(dflc runtime/cli/dflc.c)
target_link_libraries(dflc PRIVATE dfl_cli m)
add_dependencies(plan_examples dflc)

# The NVML loader of `dflc bench`'s energy line: its failure paths everywhere, real readings where
# NVIDIA's driver is.
dfl_add_test(train_power SOURCES tests/train/test_power.c runtime/cli/power.c LIBS ${CMAKE_DL_LIBS} LABELS train)

# dflc_gpu: dflc with OpenBLAS linked statically, for GPU machines without OpenBLAS (the CPU
# reference run of the CPU-vs-GPU comparison runs there too). The BLAS symbols are marked
# undefined up front so the archive, first on the line, resolves them and --as-needed drops the
# shared libopenblas.
if(TARGET dfl_cuda AND DFL_OPENBLAS_STATIC)
  set(DFL_STATIC_BLAS_LINK -Wl,--as-needed -Wl,--undefined=cblas_sgemm -Wl,--undefined=cblas_dgemm
      -Wl,--undefined=openblas_set_num_threads)
  add_executable(dflc_gpu runtime/cli/dflc.c)
  target_link_options(dflc_gpu PRIVATE ${DFL_STATIC_BLAS_LINK})
  target_link_libraries(dflc_gpu PRIVATE ${DFL_OPENBLAS_STATIC} dfl_cli m)

  # GPU: the trainer on the CUDA backend against the CPU backend (losses, params, constant device
  # memory); SKIP (77) without a GPU.
  dfl_add_test(train_cuda SOURCES tests/train/test_train_cuda.c LIBS ${DFL_OPENBLAS_STATIC} dfl_cli
               LABELS cuda_gpu)
  target_link_options(train_cuda PRIVATE ${DFL_STATIC_BLAS_LINK})
  set_tests_properties(train_cuda PROPERTIES SKIP_RETURN_CODE 77)
  # GPU: the decoder's walk and the target agreement on the CUDA backend against the CPU one.
  dfl_add_test(train_accept_cuda SOURCES tests/train/test_train_accept_cuda.c LIBS ${DFL_OPENBLAS_STATIC}
               dfl_cli LABELS cuda_gpu)
  target_link_options(train_accept_cuda PRIVATE ${DFL_STATIC_BLAS_LINK})
  set_tests_properties(train_accept_cuda PROPERTIES SKIP_RETURN_CODE 77)
endif()
# GPU: `dflc verify --cuda` on both reference fixtures (drafter head_dim 16: the CUDA-core attention
# kernels), fp32 graph within 1e-4 and bf16 graph within verify's bf16 tolerance (5e-2); SKIP (77)
# without a GPU.
if(TARGET dflc_gpu)
  foreach(fx dflash_step_public dflash_step_public_b)
    foreach(prec fp32 bf16)
      add_test(NAME cuda_verify_${fx}_${prec}
               COMMAND dflc_gpu verify tests/fixtures/${fx}.json --cuda --${prec} --quiet
               WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
      set_tests_properties(cuda_verify_${fx}_${prec} PROPERTIES SKIP_RETURN_CODE 77 LABELS cuda_gpu
                           ENVIRONMENT "${DFL_TEST_ENV}")
    endforeach()
  endforeach()
endif()

