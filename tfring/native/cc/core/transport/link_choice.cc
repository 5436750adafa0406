#include "transport/link_choice.h"

#include "common.h"

namespace tfring {
namespace {

// Best first: shared memory moves bytes at memory bandwidth, TCP goes anywhere.
constexpr LinkKind kPreference[] = {LinkKind::kShm, LinkKind::kTcp};

std::string where(int rank, const Endpoint& e) { return "rank " + std::to_string(rank) + " on " + e.machine; }

}  // namespace

bool linkEnabled(LinkKind kind, const std::string& transport, const Endpoint& from, const Endpoint& to) {
  switch (kind) {
    case LinkKind::kShm: return transport != "tcp" && from.machine == to.machine;
    case LinkKind::kTcp: return transport != "shm";
  }
  return false;
}

static bool oneMachine(const std::vector<Endpoint>& ring) {
  for (const Endpoint& e : ring) {
    if (e.machine != ring.front().machine) return false;
  }
  return true;
}

std::string ringTransport(const std::string& requested, const std::vector<Endpoint>& ring, bool mixed) {
  return requested == "auto" && !mixed && !oneMachine(ring) ? "tcp" : requested;
}

std::vector<LinkKind> planRing(const std::string& requested, const std::vector<Endpoint>& ring, bool mixed) {
  const std::string transport = ringTransport(requested, ring, mixed);
  const int size = static_cast<int>(ring.size());
  std::vector<LinkKind> plan;
  for (int r = 0; r < size; ++r) {
    const int next = (r + 1) % size;
    bool found = false;
    for (LinkKind kind : kPreference) {
      if (!linkEnabled(kind, transport, ring[r], ring[next])) continue;
      plan.push_back(kind);
      found = true;
      break;
    }
    if (!found) {
      throw Error(Code::kInvalidArgument, "transport '" + transport + "' was requested but the ranks run on several hosts (" +
                                              where(r, ring[r]) + ", " + where(next, ring[next]) +
                                              "); use 'auto' or 'tcp'");
    }
  }
  return plan;
}

}  // namespace tfring
