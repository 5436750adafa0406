#include "algorithms/allreduce_hierarchical.h"

#include "algorithms/allreduce_ring.h"

namespace tfring {

void hierarchicalAllreduce(Transport* local, int localSize, Transport* cross, int hosts, const IoList& in,
                           const IoList& out, DataType type, ReduceOp op, Deadline deadline) {
  // MEAN divides in each element's last addition: across hosts, or inside the only host.
  const int ranks = localSize * hosts;
  ringReduceScatter(local, localSize, in, out, type, op, deadline, hosts == 1 ? ranks : 1);
  const IoList segment = ownedPart(local, localSize, out, type);
  ringAllreduce(cross, hosts, segment, segment, type, op, deadline, hosts == 1 ? 1 : ranks);
  if (localSize > 1) ringAllgatherSegments(local, localSize, out, type, deadline);
}

}  // namespace tfring
