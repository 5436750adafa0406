// Ring allgather with a block per rank (blocks may differ in size).
// In P-1 steps each rank passes the block it received last to its right neighbour, so every
// block travels once around the ring: (P-1)/P of the output crosses each link.
#pragma once

#include <string>
#include <vector>

#include "common.h"
#include "transport/transport.h"

namespace tfring {

// `out` holds all blocks in rank order; `blockBytes[r]` is rank r's block size. Our own block
// must already be in place in `out`.
void ringAllgather(Transport* transport, int size, const IoList& out,
                   const std::vector<size_t>& blockBytes, Deadline deadline);

// Every rank's `mine` (any length), in rank order.
std::vector<std::string> allgatherStrings(Transport* transport, int size, const std::string& mine,
                                          Deadline deadline);

}  // namespace tfring
