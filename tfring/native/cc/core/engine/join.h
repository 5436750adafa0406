// hvd.join, Horovod's semantics: a rank out of data joins; until every rank has joined, it takes
// part in the other ranks' allreduces (sum and mean, host tensors) with zeros, so its
// contribution counts as absent and a mean still divides by the job's size. Any other collective
// that runs while a rank has joined fails on the ranks that called it, naming the joined ranks (as
// Horovod's do); the joined ranks wait on. The join completes on every rank once all have joined,
// and returns the rank that joined last.
//
// How the ranks learn it: a joined rank sends kJoin's tag, with the index of the collective at
// which it joined, in every request check (request_digest.h). When the check sees joined and
// running ranks together, a second exchange carries the running ranks' request (encodeJoinFacts)
// to the joined ones, which rebuild it over zeros. Every rank sees the same tags and facts, so all
// take the same path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data_type.h"
#include "engine/rank_names.h"
#include "engine/request.h"

namespace tfring {

// What a joined rank needs to take part in a request: its kind, type, op and shapes.
struct JoinFacts {
  OpKind kind = OpKind::kAllreduce;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  bool staged = false;
  std::vector<std::vector<int64_t>> shapes;
};

std::string encodeJoinFacts(const Request& r);
// Throws Error(kInternal) on bytes that encodeJoinFacts did not write.
JoinFacts decodeJoinFacts(const std::string& bytes);

// Whether a request runs while some ranks have joined (the one rule both sides apply).
bool joinServes(OpKind kind, ReduceOp op, bool staged);

// The error of a request refused because `joined` ranks have joined.
std::string joinRefusal(const Request& r, const std::vector<int>& joined);

// The rank that joined last: the largest join index, the highest rank among equals.
int lastJoined(const std::vector<uint64_t>& joinedAt);

}  // namespace tfring
