// Hierarchical allreduce for ranks spread over H hosts with L ranks each (Horovod's
// HOROVOD_HIERARCHICAL_ALLREDUCE, NCCL's ring-of-rings idea): a reduce-scatter over the ring
// inside each host (shared memory), an allreduce of each rank's segment over the ring of the
// ranks with the same local index on every host (TCP), then an allgather inside the host.
//
// Why: in the flat ring each host link carries 2(P-1)/P * N bytes; here every local rank sends
// 2(H-1)/H * N/L across hosts, L of them share the host's link: 2(H-1)/H * N in all. For 2 hosts
// x 2 ranks that is N instead of 1.5 N per direction of the link.
//
// Bits: each element is reduced in one fixed order (inside its host, then across hosts in host
// order) and then copied to every rank, so every rank ends with the same bits; MEAN divides by
// L*H in the element's last addition (across hosts), on the rank that owns the element.
#pragma once

#include "common.h"
#include "data_type.h"
#include "transport/transport.h"

namespace tfring {

// `local` is this rank's ring inside its host (localSize ranks), `cross` its ring across the
// hosts (hosts ranks). Same contract for in/out as ringAllreduce.
void hierarchicalAllreduce(Transport* local, int localSize, Transport* cross, int hosts, const IoList& in,
                           const IoList& out, DataType type, ReduceOp op, Deadline deadline);

}  // namespace tfring
