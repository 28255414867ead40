// tools/paddock/pipeline_cli.cpp: run, bench and serve under mpirun (dist/pipeline.h): the
// pipeline's flags and the one call that makes this process the head or a stage.
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "dist/pipeline.h"

namespace paddock::cli {

const std::vector<OptionSpec>& PipelineSpecs() {
  static const std::vector<OptionSpec> specs = {
      {{"--layers"},
       true,
       "under mpirun: layers per rank, e.g. 11,11 (default: split by each rank's memory budget)"},
      {{"--micro-batches"},
       true,
       "under mpirun: micro-batches a step is cut into, to keep the stages busy (default: one "
       "per rank)"},
      {{"--stage-timeout"},
       true,
       "under mpirun: seconds without a heartbeat before a stage counts as lost (default 3)"},
  };
  return specs;
}

// Under an MPI launcher: agree the split with the other ranks; the head goes on (true, with
// eo->stages set), a stage runs until its head ends (false: return from main). Without one,
// the pipeline's flags are an error (they would be ignored).
bool JoinPipelineIfLaunched(const Args& args, EngineOptions* eo, uint64_t memory_budget) {
  if (!dist::UnderMpi()) {
    for (const char* f : {"--layers", "--micro-batches", "--stage-timeout"})
      if (args.Has(f))
        throw UsageError(
            std::string(f) +
            " splits a model across processes: start them with mpirun (docs/deploy.md)");
    return true;
  }
  dist::PipelineOptions po;
  po.layers = args.Str("--layers");
  po.micro_batches = static_cast<int>(args.Int("--micro-batches", 0, 1, 256));
  po.stage_timeout = args.Float("--stage-timeout", 3, 0.5, 3600);
  po.memory_budget = memory_budget;
  return dist::JoinPipeline(eo, po);
}

bool JoinPipelineLaunched() {
  return dist::UnderMpi();
}

}  // namespace paddock::cli
