# Graph builders (target, DFlash drafter), weight binding, `dflc verify`, and the training loop
# and checkpoints (runtime/train*.c, runtime/checkpoint*.c, globbed in when present).
file(GLOB DFL_MODELS_SRC CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/models/*.c
  ${CMAKE_SOURCE_DIR}/runtime/train*.c
  ${CMAKE_SOURCE_DIR}/runtime/checkpoint*.c
  ${CMAKE_SOURCE_DIR}/runtime/cmd_train.c)
add_library(dfl_models STATIC ${DFL_MODELS_SRC})
foreach(l dfl_plan dfl_ir dfl_io dfl_front)
  if(TARGET ${l})
    target_link_libraries(dfl_models PUBLIC ${l})
  endif()
endforeach()
target_link_libraries(dfl_models PUBLIC ${JANSSON_LIB} m Threads::Threads)

# The trainer's backend interface (runtime/backend*.c), `dflc bench` and `dflc build`: the CPU
# backend always, the CUDA one when the toolkit is there (cuda.cmake defines dfl_cuda under the
# same condition, later; CMake resolves the name at generate time).
target_sources(dfl_models PRIVATE ${CMAKE_SOURCE_DIR}/runtime/backend.c)
foreach(f bench bench_ops power cmd_build)
  if(EXISTS ${CMAKE_SOURCE_DIR}/runtime/${f}.c)
    target_sources(dfl_models PRIVATE ${CMAKE_SOURCE_DIR}/runtime/${f}.c)
  endif()
endforeach()
find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND)
  target_sources(dfl_models PRIVATE ${CMAKE_SOURCE_DIR}/runtime/backend_cuda.c)
  target_compile_definitions(dfl_models PRIVATE DFL_HAVE_CUDA)
  target_link_libraries(dfl_models PUBLIC dfl_cuda)
endif()

# The NVML loader of `dflc bench`'s energy line: its failure paths everywhere, real readings where
# NVIDIA's driver is.
dfl_add_test(power SOURCES tests/train/test_power.c runtime/power.c LIBS ${CMAKE_DL_LIBS} LABELS train)

# Tests need the IR (graph + CPU backend) and safetensors reading.
if(TARGET dfl_ir AND TARGET dfl_io)
  # Each test is registered once its source exists, so the configure never breaks midway.
  foreach(t target_golden weights verify_corrupt train_colocated grads_lowp block_rows)
    if(EXISTS ${CMAKE_SOURCE_DIR}/tests/models/test_${t}.c)
      dfl_add_test(test_models_${t} SOURCES tests/models/test_${t}.c LIBS dfl_models LABELS models)
    endif()
  endforeach()
  # `dflc verify` on both reference fixtures (the dflc target is defined later, in cli.cmake;
  # generator expressions resolve at generate time).
  foreach(fx dflash_step_public dflash_step_public_b)
    add_test(NAME models_verify_${fx}
             COMMAND $<TARGET_FILE:dflc> verify tests/fixtures/${fx}
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    add_test(NAME models_verify_${fx}_f64
             COMMAND $<TARGET_FILE:dflc> verify --f64 tests/fixtures/${fx}
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(models_verify_${fx} models_verify_${fx}_f64 PROPERTIES LABELS models
                         ENVIRONMENT "${DFL_TEST_ENV}")
  endforeach()
endif()

# The training loop (runtime/train.c, checkpoint.c, cmd_train.c): tests/train/.
if(TARGET dfl_ir AND TARGET dfl_io AND TARGET dfl_plan)
  foreach(t train_resume train_best train_baddata train_nano train_overlap)
    if(EXISTS ${CMAKE_SOURCE_DIR}/tests/train/test_${t}.c)
      dfl_add_test(test_${t} SOURCES tests/train/test_${t}.c LIBS dfl_models LABELS train)
    endif()
  endforeach()
  if(TARGET test_train_nano)
    add_dependencies(test_train_nano dflc)   # it runs `dflc export` and `dflc eval`
  endif()
  # `dflc bench --drafter-only` (issue 6) on the CPU: a nano drafter alone, and the 27B one refused.
  add_test(NAME test_bench_drafter COMMAND bash ${CMAKE_SOURCE_DIR}/tests/train/test_bench_drafter.sh
           $<TARGET_FILE:dflc> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_bench_drafter PROPERTIES LABELS train ENVIRONMENT "${DFL_TEST_ENV}" TIMEOUT 120)
endif()

# dflc_gpu: dflc with OpenBLAS linked statically, for GPU machines without OpenBLAS (the CPU
# reference run of the CPU-vs-GPU comparison runs there too). The BLAS symbols are marked
# undefined up front so the archive, first on the line, resolves them and --as-needed drops the
# shared libopenblas.
find_file(DFL_OPENBLAS_STATIC libopenblas.a PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread
          /usr/lib/x86_64-linux-gnu NO_DEFAULT_PATH)
if(CUDAToolkit_FOUND AND DFL_OPENBLAS_STATIC)
  add_executable(dflc_gpu ${CMAKE_SOURCE_DIR}/compiler/dflc.c)
  target_link_options(dflc_gpu PRIVATE -Wl,--as-needed -Wl,--undefined=cblas_sgemm -Wl,--undefined=cblas_dgemm
                      -Wl,--undefined=openblas_set_num_threads)
  target_link_libraries(dflc_gpu PRIVATE ${DFL_OPENBLAS_STATIC} dfl_models dfl_cuda m)
endif()

# GPU: the trainer on the CUDA backend against the CPU backend (losses, params, constant device
# memory); SKIP (77) without a GPU. Static OpenBLAS as dflc_gpu.
if(TARGET dflc_gpu)
  dfl_add_test(test_train_cuda SOURCES tests/train/test_train_cuda.c LIBS ${DFL_OPENBLAS_STATIC} dfl_models dfl_cuda
               LABELS cuda_gpu)
  target_link_options(test_train_cuda PRIVATE -Wl,--as-needed -Wl,--undefined=cblas_sgemm
                      -Wl,--undefined=cblas_dgemm -Wl,--undefined=openblas_set_num_threads)
  set_tests_properties(test_train_cuda PROPERTIES SKIP_RETURN_CODE 77)
endif()
