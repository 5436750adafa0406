#include "engine/join.h"

#include "common.h"
#include "engine/request_digest.h"

namespace tfring {
namespace {

uint64_t takeVarint(const std::string& in, size_t* at) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*at >= in.size()) break;
    const auto byte = static_cast<uint8_t>(in[(*at)++]);
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return v;
  }
  throw Error(Code::kInternal, "a peer sent a malformed request description for hvd.join");
}

}  // namespace

std::string encodeJoinFacts(const Request& r) {
  std::string out;
  for (uint64_t v : {static_cast<uint64_t>(r.kind), static_cast<uint64_t>(r.type), static_cast<uint64_t>(r.op),
                     static_cast<uint64_t>(r.staged ? 1 : 0), static_cast<uint64_t>(r.tensors.size())}) {
    appendVarint(v, &out);
  }
  for (const auto& t : r.tensors) {
    appendVarint(t.shape.size(), &out);
    for (int64_t d : t.shape) appendVarint(static_cast<uint64_t>(d), &out);
  }
  return out;
}

JoinFacts decodeJoinFacts(const std::string& bytes) {
  size_t at = 0;
  JoinFacts f;
  f.kind = static_cast<OpKind>(takeVarint(bytes, &at));
  f.type = static_cast<DataType>(takeVarint(bytes, &at));
  f.op = static_cast<ReduceOp>(takeVarint(bytes, &at));
  f.staged = takeVarint(bytes, &at) != 0;
  f.shapes.resize(takeVarint(bytes, &at));
  for (auto& shape : f.shapes) {
    shape.resize(takeVarint(bytes, &at));
    for (auto& d : shape) d = static_cast<int64_t>(takeVarint(bytes, &at));
  }
  dataTypeSize(f.type);  // throws on a type outside the enum
  return f;
}

bool joinServes(OpKind kind, ReduceOp op, bool staged) {
  return kind == OpKind::kAllreduce && (op == ReduceOp::kSum || op == ReduceOp::kMean) && !staged;
}

std::string joinRefusal(const Request& r, const std::vector<int>& joined) {
  std::string what = std::string(kindName(r.kind));
  if (r.kind == OpKind::kAllreduce) what += r.staged ? " of device tensors" : std::string(" with op ") + reduceOpName(r.op);
  return std::string("tfring.") + kindName(r.kind) + " '" + r.name + "': rank" + (joined.size() > 1 ? "s " : " ") +
         rankList(joined) + (joined.size() > 1 ? " have" : " has") + " joined (hvd.join), and only allreduce with sum or mean "
         "of host tensors runs until every rank has joined, not " + what + " (Horovod's rule)";
}

int lastJoined(const std::vector<uint64_t>& joinedAt) {
  int last = 0;
  for (int k = 1; k < static_cast<int>(joinedAt.size()); ++k) {
    if (joinedAt[k] >= joinedAt[last]) last = k;
  }
  return last;
}

}  // namespace tfring
