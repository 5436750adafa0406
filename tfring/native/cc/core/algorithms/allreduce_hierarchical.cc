#include "algorithms/allreduce_hierarchical.h"

#include "algorithms/allreduce_ring.h"

namespace tfring {

void hierarchicalAllreduce(Transport* local, int localSize, Transport* cross, int hosts, const IoList& in,
                           const IoList& out, DataType type, ReduceOp op, Deadline deadline) {
  ringReduceScatter(local, localSize, in, out, type, op, deadline);
  const IoList segment = ownedPart(local, localSize, out, type);
  ringAllreduce(cross, hosts, segment, segment, type, op, deadline, localSize * hosts);
  if (localSize > 1) ringAllgatherSegments(local, localSize, out, type, deadline);
}

}  // namespace tfring
