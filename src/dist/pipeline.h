// dist/pipeline.h: a model split by layers across processes started by an MPI launcher.
//
// `mpirun -np N paddock serve|run|bench ...` starts N copies of one command line. Rank 0 is the
// head: it serves (HTTP, scheduler, sampling), holds the embeddings and the first layers, and
// its Transformer hands each micro-batch's residual stream to the link (model/stage_link.h).
// Ranks 1..N-1 are stages: each loads only its contiguous range of layers (the last one also
// the output head) and the KV cache of those layers, receives a micro-batch from the rank
// before, runs its layers and passes the result on; the last stage returns the logits rows (or
// final hidden states) to the head. Only the step's hidden states, token ids and KV block
// tables cross between processes; the head's KV manager decides every block and the stages
// mirror its choices (and its copy-on-write copies).
//
// Faults: every process sends a heartbeat to the head (and the head to every stage) from a
// thread of its own; a stage silent for PipelineOptions::stage_timeout seconds (killed,
// stopped, its host gone) is lost: the head fails the step in flight and every later one with
// an Error naming it (the service fails those requests, /health reports it), and a stage whose
// head is lost exits. The MPI job is the unit of restart (Open MPI's own fault model): run it
// with `mpirun --enable-recovery` so that the launcher lets the head report the loss instead
// of killing every rank, and restart the job (systemd, a Kubernetes restart policy).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "paddock/engine.h"

namespace paddock {
class StageLink;
}

namespace paddock::dist {

struct PipelineOptions {
  // Layers per rank, e.g. "11,11" (as many counts as ranks, summing to the model's layers);
  // empty: split by memory, each rank's share in proportion to its budget.
  std::string layers;
  int micro_batches = 0;     // a step of several sequences is cut into this many (0: one per rank)
  double stage_timeout = 5;  // seconds without a heartbeat before a process counts as lost
  uint64_t memory_budget = 0;  // per process, weights + KV (0: 90% of the memory available)
};

// Whether this process was started by an MPI launcher (Open MPI's mpirun / PMIx).
bool UnderMpi();

// Joins the job mpirun started. On rank 0 it returns true once every stage has loaded its
// layers, with eo->stages set to the link (null for a job of one process), and eo->threads set
// to this host's share of the cores when 0. On every other rank it runs this process's stage
// until the head ends and returns false: the caller then returns from main. Throws Error
// naming the stage and what differs when a stage's model file does not match the head's, and
// naming the stage and by how much when the split does not fit the budgets.
bool JoinPipeline(EngineOptions* eo, const PipelineOptions& po);

}  // namespace paddock::dist
