// The cross-rank check that runs before every collective moves data.
//
// What must agree is the request's kind, dtype, reduce op, root, tensor count and shapes, and how
// lists are cut into fusion passes. The ranks allgather a SHA-256 of those facts (encoded in a few
// bytes per tensor): 32 bytes per rank around the ring, whatever the tensors' size, plus what a
// small collective needs from every rank (its whole input, or an allgather's first dimension).
// Only when the digests differ do they exchange the facts as text, one line each, so the error
// can name the tensor and both shapes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/allgather_framed.h"
#include "common.h"
#include "engine/request.h"
#include "transport/transport.h"

namespace tfring {

// What must agree across ranks for `r`, one line each (fusionThresholdBytes decides the passes).
std::string describeRequest(const Request& r, size_t fusionThresholdBytes);

// The message for ranks that disagree: `all[k]` is rank k's describeRequest() followed by a line
// "name: <op name>" (not digested: names only make the message clearer).
std::string mismatchMessage(const Request& r, const std::vector<std::string>& all);

// Throws Error(kFailedPrecondition) naming the first difference when the ranks passed different
// requests. Every rank sees the same digests and takes the same path, so the ring stays in step
// and stays usable for the next collective. The exchange is a ring allgather, so it is also a
// barrier, and it carries each rank's `payload` (at most kGatheredAllreduceBudget bytes) to every
// rank: returns the blocks in rank order, our own payload left out.
std::vector<FramedBlock> checkRanksAgree(Transport* transport, int size, const Request& r,
                                         size_t fusionThresholdBytes, Deadline deadline, const IoList& payload = {});

}  // namespace tfring
