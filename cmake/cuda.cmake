# CUDA backend: kernels/ (CUDA C compiled at run time by NVRTC), compiler/emit.c (source emission,
# NVRTC, cubin cache), runtime/cuda/ (arena, cuBLASLt, CUDA graph capture/replay).
# Nothing links libcuda.so: the static cudart loads the driver at run time, so every binary here
# also runs (and the GPU tests SKIP) on machines without a driver.
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND)
  message(STATUS "CUDA toolkit not found: the CUDA backend is not built")
  return()
endif()

set(DFL_KERNEL_FAMILIES common elementwise rmsnorm rope gather dflash attention lce optim hybrid)
set(DFL_KERNEL_SOURCES)
foreach(f ${DFL_KERNEL_FAMILIES})
  list(APPEND DFL_KERNEL_SOURCES ${CMAKE_SOURCE_DIR}/kernels/${f}.cuh)
endforeach()
string(REPLACE ";" "\\;" DFL_KERNEL_FAMILIES_ARG "${DFL_KERNEL_FAMILIES}")
add_custom_command(
  OUTPUT ${CMAKE_BINARY_DIR}/kernels_embed.c
  COMMAND ${CMAKE_COMMAND} -DOUT=${CMAKE_BINARY_DIR}/kernels_embed.c -DSRC=${CMAKE_SOURCE_DIR}/kernels
          "-DFAMILIES=${DFL_KERNEL_FAMILIES_ARG}" -P ${CMAKE_SOURCE_DIR}/cmake/embed_kernels.cmake
  DEPENDS ${DFL_KERNEL_SOURCES} ${CMAKE_SOURCE_DIR}/cmake/embed_kernels.cmake
  COMMENT "Embedding kernels/*.cuh")

add_library(dfl_emit STATIC compiler/emit.c compiler/codegen.c compiler/lower_launch.c compiler/lower_attn.c compiler/lower_rows.c compiler/lower_hybrid.c ${CMAKE_BINARY_DIR}/kernels_embed.c)
target_include_directories(dfl_emit PUBLIC ${CUDAToolkit_INCLUDE_DIRS})
# Plain library files, not the CUDA:: imported targets: those add the libcuda stub to the link.
find_library(DFL_NVRTC_LIB NAMES nvrtc HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
find_library(DFL_CUBLASLT_LIB NAMES cublasLt HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
target_link_libraries(dfl_emit PUBLIC dfl_ir dfl_plan_core ${DFL_NVRTC_LIB}) # lower_attn.c: an op's planned scratch

add_library(dfl_cuda STATIC runtime/cuda/cuda.c runtime/cuda/impl.c runtime/cuda/capture.c runtime/cuda/attention.c runtime/cuda/gemm.c runtime/cuda/gemm_tune.c runtime/cuda/hybrid.c runtime/cuda/loss.c runtime/cuda/ops.c runtime/cuda/pointwise.c runtime/cuda/rope.c)
find_library(DFL_CUDART_STATIC NAMES libcudart_static.a HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
target_link_libraries(dfl_cuda PUBLIC dfl_emit dfl_plan_core ${DFL_CUDART_STATIC} ${DFL_CUBLASLT_LIB} rt ${CMAKE_DL_LIBS} Threads::Threads)

# CI (no GPU): the NVRTC compile of the kernel library, once per ctest run. Every test of a run
# shares one cache, DFL_CACHE_DIR = build/nvrtc-cache (DFL_TEST_ENV), emptied first by
# nvrtc_cache_clear so each run compiles the kernels it tests. cuda_nvrtc compiles the sm_90a
# library into it (every kernel in the cubin; the cache's miss, hit and store on a one-line kernel);
# the tests running `dflc build` need that fixture and copy the library instead of compiling it
# again (each compile is a minute or more of CPU on the 2-core CI machine). cuda_nvrtc_families
# (each family alone, sm_90) and cuda_nvrtc_<arch> (the whole library for each other row of the
# architecture table, docs/gpus.md: sm_80, sm_86, sm_89, sm_100a, sm_120a) compile uncached, in
# parallel with it. cuda_nvrtc_table (the table itself, no compile: a second) is in the quick tier.
add_test(NAME nvrtc_cache_clear COMMAND ${CMAKE_COMMAND} -E rm -rf ${DFL_NVRTC_CACHE})
set_tests_properties(nvrtc_cache_clear PROPERTIES LABELS cuda FIXTURES_SETUP nvrtc_cache_fresh)
dfl_add_test(cuda_nvrtc SOURCES tests/cuda/test_nvrtc.c LIBS dfl_emit LABELS cuda ARGS library)
set_tests_properties(cuda_nvrtc PROPERTIES FIXTURES_REQUIRED nvrtc_cache_fresh FIXTURES_SETUP nvrtc_library
                     TIMEOUT 900)
foreach(part families sm_80 sm_86 sm_89 sm_100a sm_120a)
  add_test(NAME cuda_nvrtc_${part} COMMAND $<TARGET_FILE:cuda_nvrtc> ${part} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(cuda_nvrtc_${part} PROPERTIES LABELS cuda ENVIRONMENT "${DFL_TEST_ENV}" TIMEOUT 900)
endforeach()
# the generated source of pointwise fusion groups: its golden file, NVRTC for sm_80 and sm_90a (seconds)
dfl_add_test(cuda_codegen SOURCES tests/cuda/test_codegen.c LIBS dfl_emit LABELS emit)
# the launches chosen at build time (compiler/lower_launch.c), per kernel variant; no NVRTC
dfl_add_test(cuda_lower_launch SOURCES tests/cuda/test_lower_launch.c LIBS dfl_emit LABELS emit)
add_test(NAME cuda_nvrtc_table COMMAND $<TARGET_FILE:cuda_nvrtc> table WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cuda_nvrtc_table PROPERTIES LABELS emit TIMEOUT 60)

# GPU: every op (forward and backward) against the CPU oracle, f32 and bf16; SKIP (77) without a GPU.
# The GPU machine has no OpenBLAS: these binaries carry a plain-loop GEMM (tests/cuda/naive_cblas.c)
# and --as-needed drops libopenblas.so from them.
dfl_add_test(cuda_ops SOURCES tests/cuda/test_ops.c tests/cuda/test_ops_dense.c tests/cuda/test_ops_attention.c tests/cuda/test_ops_loss_optim.c tests/cuda/test_ops_hybrid.c tests/cuda/naive_cblas.c LIBS dfl_cuda dfl_cpu LABELS cuda_gpu)
target_link_options(cuda_ops PRIVATE -Wl,--as-needed)
set_tests_properties(cuda_ops PROPERTIES SKIP_RETURN_CODE 77)

# GPU: a whole nano training step (colocated target, drafter, CE, autodiff, AdamW) from the memory
# plan, captured into CUDA graphs and replayed, against the CPU oracle; SKIP (77) without a GPU.
  dfl_add_test(cuda_step SOURCES tests/cuda/test_step.c tests/cuda/naive_cblas.c LIBS dfl_cli LABELS cuda_gpu)
  target_link_options(cuda_step PRIVATE -Wl,--as-needed)
  set_tests_properties(cuda_step PROPERTIES SKIP_RETURN_CODE 77)
  # GPU: the target forward in bf16 (unquantized, fp8, fp8_fast) against Hugging Face's hidden states;
  # the CPU's test_models_target_golden built with DFL_GOLDEN_CUDA. SKIP (77) without a GPU.
  dfl_add_test(cuda_golden SOURCES tests/models/test_target_golden.c tests/cuda/naive_cblas.c LIBS dfl_cli LABELS cuda_gpu)
  target_compile_definitions(cuda_golden PRIVATE DFL_GOLDEN_CUDA)
  target_link_options(cuda_golden PRIVATE -Wl,--as-needed)
  set_tests_properties(cuda_golden PROPERTIES SKIP_RETURN_CODE 77)
  # GPU: random frozen weights drawn by threads in segments equal the CPU's per-tensor streams.
  dfl_add_test(cuda_init SOURCES tests/cuda/test_init.c tests/cuda/naive_cblas.c LIBS dfl_cli LABELS cuda_gpu)
  target_link_options(cuda_init PRIVATE -Wl,--as-needed)
  set_tests_properties(cuda_init PROPERTIES SKIP_RETURN_CODE 77)
  # GPU: compile { gemm_tune }: the timed picks are right, cached, reused bit for bit, keyed.
  dfl_add_test(cuda_gemm_tune SOURCES tests/cuda/test_gemm_tune.c tests/cuda/naive_cblas.c LIBS dfl_cli LABELS cuda_gpu)
  target_link_options(cuda_gemm_tune PRIVATE -Wl,--as-needed)
  set_tests_properties(cuda_gemm_tune PROPERTIES SKIP_RETURN_CODE 77)

# GPU benchmark of the attention kernels at the Qwen3-8B drafter shapes (tensor cores vs the
# CUDA-core reference kernels); not a ctest test: run build/bench_attention on a GPU machine.
add_executable(bench_attention tests/cuda/bench_attention.c tests/cuda/naive_cblas.c)
target_link_libraries(bench_attention PRIVATE dfl_cuda dfl_cpu m)
target_link_options(bench_attention PRIVATE -Wl,--as-needed)

# CI (no GPU): dflc build on every single-device example emits and NVRTC-compiles its kernels.
# Each build copies the library cuda_nvrtc compiled into the run's cache (into its own cubin
# directory) rather than compiling it: 140 s of CPU each on the 2-core build machine otherwise.
add_test(NAME cuda_build_examples COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cuda/build_examples.sh $<TARGET_FILE:dflc>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cuda_build_examples PROPERTIES LABELS cuda ENVIRONMENT "${DFL_TEST_ENV}"
                     FIXTURES_REQUIRED nvrtc_library TIMEOUT 600)

# GPU benchmark of the target's GEMM shapes in bf16 and in FP8 with per-row scales (docs/fp8.md),
# after a small FP8 GEMM checked against the host; not a ctest test: run build/bench_fp8_gemm.
add_executable(bench_fp8_gemm tests/cuda/bench_fp8_gemm.c)
target_link_libraries(bench_fp8_gemm PRIVATE ${DFL_CUDART_STATIC} ${DFL_CUBLASLT_LIB} rt ${CMAKE_DL_LIBS} Threads::Threads m)
target_include_directories(bench_fp8_gemm PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
# bench_gemm_layout: bf16 GEMMs with the weight operand as stored or transposed (docs/performance.md);
# not a ctest test: run build/bench_gemm_layout on a GPU.
add_executable(bench_gemm_layout tests/cuda/bench_gemm_layout.c)
target_link_libraries(bench_gemm_layout PRIVATE ${DFL_CUDART_STATIC} ${DFL_CUBLASLT_LIB} rt ${CMAKE_DL_LIBS} Threads::Threads m)
target_include_directories(bench_gemm_layout PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
# bench_optim: the optimizer's multi-tensor kernels alone at a drafter's parameter shapes
# (docs/performance.md); not a ctest test: run build/bench_optim on a GPU.
add_executable(bench_optim tests/cuda/bench_optim.c)
target_link_libraries(bench_optim PRIVATE dfl_cuda dfl_cpu m)
target_link_options(bench_optim PRIVATE -Wl,--as-needed)
# bench_memops: the step's memory-bound row kernels alone at its shapes, each against a device copy of
# the same bytes (docs/performance.md, session 17); not a ctest test: run build/bench_memops on a GPU.
add_executable(bench_memops tests/cuda/bench_memops.c)
target_link_libraries(bench_memops PRIVATE dfl_cuda dfl_cpu m)
target_include_directories(bench_memops PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_options(bench_memops PRIVATE -Wl,--as-needed)
# bench_gdn: GATED_DELTA's chunk kernel against flash-linear-attention on the same inputs (bench/cuda/run.sh);
# not a ctest test: it runs on a GPU machine after bench/cuda/gdn_fla.py.
add_executable(bench_gdn bench/cuda/bench_gdn.c tests/cuda/naive_cblas.c)
target_link_libraries(bench_gdn PRIVATE dfl_cuda dfl_cpu m)
target_link_options(bench_gdn PRIVATE -Wl,--as-needed)
# bench_gemm: cuBLASLt's heuristic candidates timed at the 27B target's GEMM shapes (is the first one,
# dflc's choice, the fastest?) and the sustained rate; not a ctest test: bench/gpu_target27_session.sh DIR gemm on a GPU.
add_executable(bench_gemm bench/cuda/bench_gemm.c)
target_include_directories(bench_gemm PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(bench_gemm PRIVATE ${DFL_CUDART_STATIC} ${DFL_CUBLASLT_LIB} rt ${CMAKE_DL_LIBS} Threads::Threads m)
