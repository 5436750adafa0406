// Broadcast from any root along the ring, pipelined: the data is cut into chunks and every rank
// forwards chunk c to its right neighbour while it receives chunk c+1 from its left, so the
// time is about (chunks + P - 2) chunk transfers rather than (P - 1) whole-buffer transfers.
#pragma once

#include "common.h"
#include "transport/transport.h"

namespace tfring {

// `data` is the buffer on every rank: read on the root, overwritten elsewhere.
void ringBroadcast(Transport* transport, int size, int root, const IoList& data, Deadline deadline);

}  // namespace tfring
