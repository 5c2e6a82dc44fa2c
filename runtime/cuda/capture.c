/*
** capture.c: the CUDA backend's captured graphs (cuda.h dfl_cuda_run): the ops of a phase mask
** enqueued once under stream capture (the optimizer as a low-priority branch where the mask asks for
** the overlap), instantiated, and replayed on every later call; and the eager form the capture
** records, op by op.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/cuda/impl.h"

int dfl_cuda_run_eager(dfl_cuda *c, unsigned mask) {
  for (int i = 0; i < c->g->nops; i++)
    if (mask & (1u << c->g->ops[i].phase)) {
      int rc = dfl_cuda_run_op_grouped(c, i);
      if (rc) {
        fprintf(stderr, "dflc: cuda backend: op %d %s (%s) failed\n", i, dfl_opcode_name(c->g->ops[i].code), c->g->ops[i].label);
        return rc;
      }
    }
  return DFL_OK;
}

/* DFL_RUN_OVERLAP_OPT, inside a capture: the optimizer ops as a branch on a low-priority stream,
** the rest on a high-priority one, both joined back. The optimizer's memory-bound kernels take the
** SMs the target's GEMMs leave idle (wave tails, small kernels) without delaying them; the nodes
** keep their streams' priorities (cudaGraphInstantiateFlagUseNodePriority). */
static int run_forked(dfl_cuda *c, unsigned side, unsigned rest) {
  struct dfl_cuda_impl *im = c->impl;
  cudaStream_t origin = im->stream;
  if (!im->hi) {
    int least = 0, greatest = 0;
    CU(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CU(cudaStreamCreateWithPriority(&im->hi, cudaStreamNonBlocking, greatest));
    CU(cudaStreamCreateWithPriority(&im->lo, cudaStreamNonBlocking, least));
    CU(cudaEventCreateWithFlags(&im->fork, cudaEventDisableTiming));
    for (int k = 0; k < 2; k++) CU(cudaEventCreateWithFlags(&im->join[k], cudaEventDisableTiming));
  }
  CU(cudaEventRecord(im->fork, origin));
  CU(cudaStreamWaitEvent(im->lo, im->fork, 0));
  CU(cudaStreamWaitEvent(im->hi, im->fork, 0));
  im->stream = im->lo;
  int rc = dfl_cuda_run_eager(c, side);
  im->stream = im->hi;
  if (rc == DFL_OK) rc = dfl_cuda_run_eager(c, rest);
  im->stream = origin;
  /* joined even after a failure, so that the capture can end */
  CU(cudaEventRecord(im->join[0], im->lo));
  CU(cudaEventRecord(im->join[1], im->hi));
  CU(cudaStreamWaitEvent(origin, im->join[0], 0));
  CU(cudaStreamWaitEvent(origin, im->join[1], 0));
  return rc;
}

int dfl_cuda_run(dfl_cuda *c, unsigned mask) {
  struct dfl_cuda_impl *im = c->impl;
  for (int i = 0; i < im->nexec; i++)
    if (im->execs[i].mask == mask) { CU(cudaGraphLaunch(im->execs[i].exec, im->stream)); return DFL_OK; }
  if (im->nexec == MAX_EXECS) {
    fprintf(stderr, "dflc: cuda backend: more than %d distinct phase masks captured\n", MAX_EXECS);
    return DFL_ERR;
  }
  unsigned phases = mask & ~DFL_RUN_OVERLAP_OPT, opt = 1u << DFL_PH_OPTIMIZER;
  /* Concurrent branches need their own scratch: without a plan's per-op workspaces every op shares
  ** one buffer, so the mask runs in order then. */
  int fork = (mask & DFL_RUN_OVERLAP_OPT) && (phases & opt) && (phases & ~opt) && im->scratch_bytes == 0;
  cudaGraph_t graph;
  CU(cudaStreamBeginCapture(im->stream, cudaStreamCaptureModeThreadLocal));
  int rc = fork ? run_forked(c, phases & opt, phases & ~opt) : dfl_cuda_run_eager(c, phases);
  cudaError_t e = cudaStreamEndCapture(im->stream, &graph);
  if (rc) { if (e == cudaSuccess) cudaGraphDestroy(graph); return rc; }
  if (e != cudaSuccess) {
    fprintf(stderr, "%s:%d: cudaStreamEndCapture failed: %s\n", __FILE__, __LINE__, cudaGetErrorString(e));
    return DFL_ERR;
  }
  /* its launches, for `dflc bench` (a mask without ops captures an empty graph, whose node list
  ** cudaGraphGetNodes refuses to fill: nothing to count) */
  int kernels = 0, other = 0;
  size_t nn = 0;
  CU(cudaGraphGetNodes(graph, NULL, &nn));
  if (nn > 0) {
    cudaGraphNode_t *nodes = malloc(nn * sizeof *nodes);
    if (!nodes) { cudaGraphDestroy(graph); return DFL_ENOMEM; }
    CU(cudaGraphGetNodes(graph, nodes, &nn));
    for (size_t k = 0; k < nn; k++) {
      enum cudaGraphNodeType ty;
      CU(cudaGraphNodeGetType(nodes[k], &ty));
      if (ty == cudaGraphNodeTypeKernel) kernels++;
      else if (ty != cudaGraphNodeTypeEmpty) other++;
    }
    free(nodes);
  }
  cudaGraphExec_t ex;
  e = cudaGraphInstantiate(&ex, graph, fork ? cudaGraphInstantiateFlagUseNodePriority : 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    fprintf(stderr, "%s:%d: cudaGraphInstantiate failed: %s\n", __FILE__, __LINE__, cudaGetErrorString(e));
    return DFL_ERR;
  }
  im->execs[im->nexec].mask = mask;
  im->execs[im->nexec].kernels = kernels, im->execs[im->nexec].other = other;
  im->execs[im->nexec++].exec = ex;
  dfl_cu_memtrace("run: graph captured");
  CU(cudaGraphLaunch(ex, im->stream));
  dfl_cu_memtrace("run: first replay");
  return DFL_OK;
}

int dfl_cuda_graph_nodes(const dfl_cuda *c, unsigned mask, int *other) {
  for (int i = 0; c->impl && i < c->impl->nexec; i++)
    if (c->impl->execs[i].mask == mask) {
      if (other) *other = c->impl->execs[i].other;
      return c->impl->execs[i].kernels;
    }
  return -1;
}
