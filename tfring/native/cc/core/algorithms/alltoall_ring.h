// All-to-all over the ring: every rank sends a block (any size, possibly empty) to every rank.
//
// The transport only links ring neighbours, so blocks are relayed: in step s (1..P-1) each rank
// passes right the blocks that left rank (rank - s + 1) and still have further to go, keeps
// the one addressed to it from what arrives and holds the rest for the next step. A block
// crosses as many links as its destination is far to the right of its origin, (P-1)/2 links on
// average where a direct exchange would cross one: fine for the few ranks a host holds and for
// the small blocks of a routing step, not bandwidth-optimal for large P.
#pragma once

#include <vector>

#include "common.h"
#include "transport/transport.h"

namespace tfring {

// `bytes[o][d]` is the size of the block rank o sends to rank d, the same matrix on every rank.
// `in` holds this rank's blocks in destination order, `out` receives its blocks in origin order
// (its own block to itself is copied).
void ringAlltoall(Transport* transport, int size, const IoList& in, const IoList& out,
                  const std::vector<std::vector<size_t>>& bytes, Deadline deadline);

}  // namespace tfring
