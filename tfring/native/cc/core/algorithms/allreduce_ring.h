// Ring allreduce (Patarasuk & Yuan; Baidu's ring; Gloo's allreduce_ring).
//
// The N bytes are cut into P segments. Reduce-scatter: in P-1 steps each rank sends one segment
// to its right neighbour and reduces the segment arriving from its left into its output; after
// them rank r holds the fully reduced segment (r+1) mod P. Allgather: in P-1 more steps the
// reduced segments travel once around the ring. Each rank sends and receives 2(P-1)/P * N bytes,
// independent of P, which is why the ring is bandwidth-optimal.
//
// Pipelining: a received segment reaches the reduction in bounce-buffer pieces (<= 1 MiB) as it
// arrives, so reducing one piece overlaps with the transfer of the next (RecvTarget::consume).
// The data is a list of pieces (IoList): tensors are reduced in place of the caller, without
// first packing them into one buffer. `in` and `out` must have identical piece lengths; they may
// be the same memory. No copy of `in` to `out` is made: step 0 reads `in`, later steps `out`.
#pragma once

#include "common.h"
#include "data_type.h"
#include "transport/transport.h"

namespace tfring {

// `transport` is null when size == 1.
void ringAllreduce(Transport* transport, int size, const IoList& in, const IoList& out,
                   DataType type, ReduceOp op, Deadline deadline);

}  // namespace tfring
