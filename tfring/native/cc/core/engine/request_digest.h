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
#include "engine/join.h"
#include "engine/rank_names.h"
#include "engine/request.h"
#include "transport/transport.h"

namespace tfring {

// What must agree across ranks for `r`, one line each (fusionThresholdBytes decides the passes).
std::string describeRequest(const Request& r, size_t fusionThresholdBytes);

// The message for ranks that disagree: `all[k]` is rank k's describeRequest() followed by a line
// "name: <op name>" (not digested: names only make the message clearer).
// Ranks are named by `names` (rank_names.h).
std::string mismatchMessage(const Request& r, const std::vector<std::string>& all, const RankNames& names = RankNames());

// Appends `v` as a varint (7 bits a byte, low first) to `out`.
void appendVarint(uint64_t v, std::string* out);

// Throws Error(kFailedPrecondition) naming the first difference when the ranks passed different
// requests. Every rank sees the same digests and takes the same path, so the ring stays in step
// and stays usable for the next collective. The exchange is a ring allgather, so it is also a
// barrier, and it carries each rank's `payload` (at most kGatheredAllreduceBudget bytes) to every
// rank: returns the blocks in rank order, our own payload left out.
// Ranks that have joined (engine/join.h) send the join tag instead: they are left out of the
// comparison and listed in `joined`; when there are any, the request's facts go to them in a
// second exchange, and a request that does not run with joined ranks throws joinRefusal().
std::vector<FramedBlock> checkRanksAgree(Transport* transport, int size, const Request& r,
                                         size_t fusionThresholdBytes, Deadline deadline, const IoList& payload,
                                         std::vector<int>* joined, const RankNames& names = RankNames());

// One check as a joined rank sees it: it sends the join tag with `joinedAt` (the index of the
// collective at which it joined). Either every rank has joined (allJoined, lastJoined set), or
// the others run a request: `serve` says whether this rank takes part in it (with zeros), as
// `facts` describe it.
struct JoinRound {
  bool allJoined = false;
  int lastJoined = -1;
  bool serve = false;
  JoinFacts facts;
};
JoinRound joinRound(Transport* transport, int size, int rank, size_t fusionThresholdBytes, uint64_t joinedAt,
                    Deadline deadline, const RankNames& names = RankNames());

}  // namespace tfring
