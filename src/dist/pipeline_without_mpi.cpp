// dist/pipeline_without_mpi.cpp: dist/pipeline.h in a build without Open MPI (PADDOCK_MPI=OFF,
// the AArch64 cross build). A process started by an MPI launcher is told by name that this
// binary cannot join the job; everything else runs as in any build.
#include <cstdlib>

#include "base/strings.h"
#include "dist/pipeline.h"

namespace paddock::dist {

bool UnderMpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

bool JoinPipeline(EngineOptions*, const PipelineOptions&) {
  Fail(
      "this paddock was built without Open MPI (PADDOCK_MPI=OFF): it cannot be a rank of an "
      "mpirun job; build it with libopenmpi-dev installed");
}

}  // namespace paddock::dist
