// Ring allreduce (Patarasuk & Yuan; Baidu's ring; Gloo's allreduce_ring).
//
// The N bytes are cut into P segments. Reduce-scatter: in P-1 steps each rank sends one segment
// to its right neighbour and reduces the segment arriving from its left into its output; after
// them rank r holds the fully reduced segment ownedSegment(r, P) = (r+1) mod P. Allgather: in P-1
// more steps the reduced segments travel once around the ring. Each rank sends and receives
// 2(P-1)/P * N bytes, independent of P, which is why the ring is bandwidth-optimal.
//
// Pipelining: a received segment reaches the reduction in bounce-buffer pieces (<= 1 MiB) as it
// arrives, so reducing one piece overlaps with the transfer of the next (RecvTarget::consume).
// The data is a list of pieces (IoList): tensors are reduced in place of the caller, without
// first packing them into one buffer. `in` and `out` must have identical piece lengths; they may
// be the same memory. No copy of `in` to `out` is made: step 0 reads `in`, later steps `out`.
//
// The two phases are public so that the hierarchical allreduce (allreduce_hierarchical.h) can
// run them on the ring inside a host, with a ring across hosts in between.
#pragma once

#include <functional>
#include <vector>

#include "common.h"
#include "data_type.h"
#include "transport/transport.h"

namespace tfring {

// How `bytes` of elements of `elem` bytes are cut into `parts` segments (element boundaries).
struct Segments {
  size_t count, elem;
  int parts;
  Segments(size_t bytes, size_t elemBytes, int n) : count(bytes / elemBytes), elem(elemBytes), parts(n) {}
  size_t start(int s) const { return (count * static_cast<size_t>(s) / parts) * elem; }
  size_t length(int s) const { return start(s + 1) - start(s); }
};

inline int ownedSegment(int rank, int size) { return (rank + 1) % size; }

// The pieces of `out` that this rank owns after ringReduceScatter (all of it when size == 1).
IoList ownedPart(const Transport* transport, int size, const IoList& out, DataType type);

// Called as each phase of ringAllreduce ends, with its name ("reduce-scatter", "allgather"), so a
// caller can time them (the timeline).
using PhaseEnded = std::function<void(const char* phase)>;

// `transport` is null when size == 1. MEAN divides the sum by `meanOver` ranks (0: by `size`),
// in its last addition (reduceMeanInto); with size 1 there is none, so meanOver must be 0 or 1.
void ringAllreduce(Transport* transport, int size, const IoList& in, const IoList& out, DataType type,
                   ReduceOp op, Deadline deadline, int meanOver = 0, const PhaseEnded& phaseEnded = nullptr);

// The first phase: afterwards segment ownedSegment(rank, size) of `out` holds the reduction of
// every rank's `in`; the other segments hold partial results. MEAN: the owned segment is the sum
// divided by `meanOver` in its last addition, or the plain sum for meanOver 1 (for a caller that
// adds more to it, as the hierarchical allreduce does).
void ringReduceScatter(Transport* transport, int size, const IoList& in, const IoList& out, DataType type,
                       ReduceOp op, Deadline deadline, int meanOver = 1);

// Reduce-scatter with the cut given: `blockBytes[r]` bytes (whole elements) of the data end on
// rank r, reduced over every rank's `in`, at their place in `out` (the rest of `out` holds
// partial results). MEAN divides by `meanOver` as ringReduceScatter does. The reduce-scatter
// collective (engine: blocks of rows, Horovod's split of the first dimension).
void ringReduceScatterToRanks(Transport* transport, int size, const IoList& in, const IoList& out,
                              const std::vector<size_t>& blockBytes, DataType type, ReduceOp op, Deadline deadline,
                              int meanOver);

// The second phase: every rank's owned segment of `out` reaches every rank.
void ringAllgatherSegments(Transport* transport, int size, const IoList& out, DataType type, Deadline deadline);

}  // namespace tfring
