#include "engine/request_digest.h"

#include <cctype>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "algorithms/allgather_ring.h"
#include "algorithms/allreduce_gathered.h"
#include "engine/fusion_plan.h"
#include "rendezvous/hmac.h"

namespace tfring {
namespace {

std::string shapeText(const std::vector<int64_t>& shape, size_t from) {
  std::string s = "[";
  for (size_t i = from; i < shape.size(); ++i) {
    if (i > from) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// What the whole call must agree on: kind, dtype, reduce op, root, tensor count.
std::string headLine(const Request& r) {
  std::ostringstream head;
  head << kindName(r.kind) << " dtype=" << dataTypeName(r.type);
  if (r.kind == OpKind::kAllreduce || r.kind == OpKind::kReducescatter) head << " op=" << reduceOpName(r.op);
  if (r.kind == OpKind::kBroadcast) head << " root=" << r.root;
  head << " tensors=" << r.tensors.size();
  if (!r.owners.empty()) head << " to owners";
  if (r.staged) head << " of device tensors";  // staged tensors never take the gathered path
  return head.str();
}

// The last line: how this rank cuts a list into passes (agreed at init, checked again here).
std::string passesLine(size_t fusionThresholdBytes) {
  return "passes: fusion_threshold_bytes=" + std::to_string(fusionThresholdBytes) +
         " pack_below=" + std::to_string(kPackBelow) + " gathered_budget=" + std::to_string(kGatheredAllreduceBudget);
}

// The dimensions that must match: all of them, or an allgather's or alltoall's all but the first.
size_t firstCheckedDim(const Request& r) {
  return r.kind == OpKind::kAllgather || r.kind == OpKind::kAlltoall ? 1 : 0;
}

// One line for the call, one per tensor: what must agree across ranks.
std::vector<std::string> describeLines(const Request& r) {
  std::vector<std::string> lines{headLine(r)};
  const bool firstMayDiffer = firstCheckedDim(r) == 1;  // written "*"
  for (const auto& t : r.tensors) {
    if (!firstMayDiffer) {
      lines.push_back(shapeText(t.shape, 0));
    } else {
      lines.push_back(t.shape.size() > 1 ? "[*, " + shapeText(t.shape, 1).substr(1) : "[*]");
    }
  }
  if (!r.owners.empty()) {
    std::string owners = "owners:";
    for (int o : r.owners) owners += " " + std::to_string(o);
    lines.push_back(owners);
  }
  return lines;
}

// The same facts as describeRequest in a few bytes per tensor and no string per tensor (a list
// of 1000 gradients is checked at every step): the two lines as text, then each tensor's rank
// and checked dimensions as varints, which no two different shape lists share.
std::string digestInput(const Request& r, size_t fusionThresholdBytes) {
  std::string bytes = headLine(r) + "\n" + passesLine(fusionThresholdBytes) + "\n";
  bytes.reserve(bytes.size() + 4 * r.tensors.size());
  const size_t from = firstCheckedDim(r);
  for (const auto& t : r.tensors) {
    appendVarint(t.shape.size(), &bytes);
    for (size_t i = from; i < t.shape.size(); ++i) appendVarint(static_cast<uint64_t>(t.shape[i]), &bytes);
  }
  for (int o : r.owners) appendVarint(static_cast<uint64_t>(o), &bytes);  // after the shapes: no overlap
  return bytes;
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// Words of op names that name what a model trains: Keras' weights, layers and optimizers
// ("dense_1/kernel", "sequential_conv2d_bias", "SGD/momentum"), matched against the name's words
// ("conv" by its prefix, as in "conv2d").
bool namesModelState(const std::string& name) {
  static const char* const kWords[] = {
      "kernel", "bias", "gamma", "beta", "moving", "embeddings", "weights",                      // weights
      "dense", "embedding", "lstm", "gru", "rnn", "normalization", "attention", "layer",         // layers
      "optimizer", "momentum", "velocity", "sgd", "adam", "adamw", "nadam", "adamax", "rmsprop",  // optimizers
      "adagrad", "adadelta", "ftrl", "lamb", "lars", "lion"};
  std::string word;
  auto matches = [&word] {
    if (word.rfind("conv", 0) == 0) return true;
    for (const char* w : kWords) {
      if (word == w) return true;
    }
    return false;
  };
  for (size_t i = 0; i <= name.size(); ++i) {
    const unsigned char c = i < name.size() ? static_cast<unsigned char>(name[i]) : ' ';
    if (std::isalnum(c)) {
      word += static_cast<char>(std::tolower(c));
      continue;
    }
    if (!word.empty() && matches()) return true;
    word.clear();
  }
  return false;
}

// Why the ranks passed different requests, from the two op names: ranks whose collectives are
// named after weights, layers or optimizers train different things; other names cannot tell,
// and ranks that ran different numbers of steps reach different collectives.
std::string likelyCause(const std::string& name0, const std::string& namek, bool headsDiffer) {
  if (namesModelState(name0) && namesModelState(namek)) {
    return " (the op names say the ranks train different models or optimizers: compare the layers, "
           "variables and optimizer each rank builds)";
  }
  if (!headsDiffer) return "";
  return " (if this is not a bug in the program, the ranks are out of step: did they run different numbers of "
         "steps, e.g. on datasets of different sizes?)";
}

Digest requestDigest(const Request& r, size_t fusionThresholdBytes) {
  const std::string facts = digestInput(r, fusionThresholdBytes);
  return sha256(facts.data(), facts.size());
}

std::vector<uint8_t> joinTag(size_t fusionThresholdBytes) {
  Request join;
  join.kind = OpKind::kJoin;
  const Digest digest = requestDigest(join, fusionThresholdBytes);
  return std::vector<uint8_t>(digest.begin(), digest.end());
}

// The ranks whose tag is the join tag, and whether the others' tags all agree.
std::vector<int> joinedRanks(const std::vector<FramedBlock>& blocks, const std::vector<uint8_t>& tag, bool* othersAgree) {
  std::vector<int> joined;
  const FramedBlock* first = nullptr;
  *othersAgree = true;
  for (size_t k = 0; k < blocks.size(); ++k) {
    if (blocks[k].tag == tag) {
      joined.push_back(static_cast<int>(k));
    } else if (!first) {
      first = &blocks[k];
    } else {
      *othersAgree = *othersAgree && blocks[k].tag == first->tag;
    }
  }
  return joined;
}

}  // namespace

void appendVarint(uint64_t v, std::string* out) {
  for (; v >= 0x80; v >>= 7) out->push_back(static_cast<char>((v & 0x7f) | 0x80));
  out->push_back(static_cast<char>(v));
}

std::string mismatchMessage(const Request& r, const std::vector<std::string>& all, const RankNames& names) {
  auto described = [](const std::string& text, std::string* name) {
    auto lines = split(text);
    if (!lines.empty() && lines.back().rfind("name: ", 0) == 0) {
      *name = lines.back().substr(6);
      lines.pop_back();
    }
    return lines;
  };
  std::string name0, namek;
  auto first = described(all[0], &name0);
  for (size_t k = 1; k < all.size(); ++k) {
    auto other = described(all[k], &namek);
    if (other == first) continue;
    std::string prefix = std::string("tfring.") + kindName(r.kind) + " '" + r.name +
                         "': ranks passed different inputs: ";
    if (first[0] != other[0]) {
      return prefix + "rank " + std::to_string(names(0)) + " called " + first[0] + " ('" + name0 + "') but rank " +
             std::to_string(names(k)) + " called " +
             other[0] + " ('" + namek + "')" + likelyCause(name0, namek, true);
    }
    for (size_t i = 1; i < first.size() && i < other.size(); ++i) {
      if (first[i] != other[i] && first[i].rfind("passes:", 0) == 0) {
        return prefix + "rank " + std::to_string(names(0)) + " cuts lists into " + first[i] + " but rank " +
               std::to_string(names(k)) + " into " + other[i];
      }
      if (first[i] != other[i] && first[i].rfind("owners:", 0) == 0) {
        return prefix + "rank " + std::to_string(names(0)) + " gave the tensors the " + first[i] + " but rank " +
               std::to_string(names(k)) + " the " + other[i];
      }
      if (first[i] != other[i]) {
        return prefix + "tensor " + std::to_string(i - 1) + " has shape " + first[i] + " on rank " +
               std::to_string(names(0)) + " but " + other[i] + " on rank " + std::to_string(names(k)) +
               likelyCause(name0, namek, false);
      }
    }
  }
  return std::string("tfring.") + kindName(r.kind) + " '" + r.name + "': ranks passed different inputs";
}


std::string describeRequest(const Request& r, size_t fusionThresholdBytes) {
  return join(describeLines(r)) + passesLine(fusionThresholdBytes) + "\n";
}

std::vector<FramedBlock> checkRanksAgree(Transport* transport, int size, const Request& r,
                                         size_t fusionThresholdBytes, Deadline deadline, const IoList& payload,
                                         std::vector<int>* joined, const RankNames& names) {
  const Digest digest = requestDigest(r, fusionThresholdBytes);
  auto blocks = ringAllgatherFramed(transport, size, std::vector<uint8_t>(digest.begin(), digest.end()), payload,
                                    kGatheredAllreduceBudget, deadline);
  bool same = true;
  for (const auto& b : blocks) same = same && b.tag == blocks[0].tag;
  joined->clear();
  if (same) return blocks;  // ours is a request's tag, so no rank has joined
  *joined = joinedRanks(blocks, joinTag(fusionThresholdBytes), &same);
  if (!joined->empty()) {
    const std::vector<int> joinedRanks = names(*joined);  // as users know them
    if (!same) {
      throw Error(Code::kFailedPrecondition, std::string("tfring.") + kindName(r.kind) + " '" + r.name +
                                                 "': ranks passed different inputs, while rank(s) " +
                                                 rankList(joinedRanks) + " have joined (hvd.join)");
    }
    allgatherStrings(transport, size, encodeJoinFacts(r), deadline);  // what the joined ranks take part in
    if (!joinServes(r.kind, r.op, static_cast<bool>(r.staged))) throw Error(Code::kFailedPrecondition, joinRefusal(r, joinedRanks));
    return blocks;
  }
  const std::string mine = describeRequest(r, fusionThresholdBytes);
  auto all = allgatherStrings(transport, size, mine + "name: " + r.name + "\n", deadline);
  throw Error(Code::kFailedPrecondition, mismatchMessage(r, all, names));
}

JoinRound joinRound(Transport* transport, int size, int rank, size_t fusionThresholdBytes, uint64_t joinedAt,
                    Deadline deadline, const RankNames& names) {
  const auto tag = joinTag(fusionThresholdBytes);
  auto blocks = ringAllgatherFramed(transport, size, tag, {{&joinedAt, sizeof(joinedAt)}}, kGatheredAllreduceBudget,
                                    deadline);
  bool othersAgree = true;
  const auto joined = joinedRanks(blocks, tag, &othersAgree);
  JoinRound round;
  if (static_cast<int>(joined.size()) == size) {
    std::vector<uint64_t> at(size, joinedAt);
    for (int k = 0; k < size; ++k) {
      if (k == rank) continue;
      if (blocks[k].payload.size() != sizeof(uint64_t)) {
        throw PeerError(names(k), "rank " + std::to_string(names(k)) + " sent a malformed join");
      }
      std::memcpy(&at[k], blocks[k].payload.data(), sizeof(uint64_t));
    }
    round.allJoined = true;
    round.lastJoined = lastJoined(at);
    return round;
  }
  if (!othersAgree) return round;  // the running ranks disagree: they fail their request
  auto facts = allgatherStrings(transport, size, "", deadline);
  int running = 0;
  while (blocks[running].tag == tag) ++running;
  round.facts = decodeJoinFacts(facts[running]);
  round.serve = joinServes(round.facts.kind, round.facts.op, round.facts.staged);
  return round;
}

}  // namespace tfring
