// Which transport carries each link of the ring, decided link by link, so that one ring can mix
// shared memory (to a neighbour on this host) and TCP (to a neighbour on another host).
//
// As Horovod's operation_manager does with its backends, the link kinds are asked in order of
// preference whether they can carry a link, and the first that can does: shared memory when both
// ranks are on one host and the configured transport allows it, else TCP. Every rank plans the
// whole ring from the endpoints all ranks published, so all agree on every link, and a request
// that cannot be met (transport=shm across hosts) fails every rank at once, none left waiting.
#pragma once

#include <string>
#include <vector>

#include "transport/link.h"

namespace tfring {

// What a rank publishes at rendezvous about itself.
struct Endpoint {
  std::string host;     // where its data port listens
  int port = 0;
  std::string machine;  // host identity: ranks with equal ones can share memory
  int pid = 0;
};

// Whether `kind` can carry the link from `from` to `to`; `transport` is the configured choice
// (auto | shm | tcp).
bool linkEnabled(LinkKind kind, const std::string& transport, const Endpoint& from, const Endpoint& to);

// The transport a ring of these endpoints uses for `requested` (auto | shm | tcp): "tcp" for
// auto on several hosts without `mixed`, else `requested`. The hierarchical allreduce's rings take
// the world ring's answer, so that mixed_ring=0 means TCP on every link of every ring.
std::string ringTransport(const std::string& requested, const std::vector<Endpoint>& ring, bool mixed);

// plan[r] is the kind of the link from rank r to rank (r + 1) % size: the first enabled kind in
// order of preference. Throws Error(kInvalidArgument) naming two ranks when a link has none.
// Without `mixed`, transport=auto on ranks that span hosts uses TCP on every link (tfring's rule
// before links were chosen one by one; mixed rings become the default once tested across hosts).
std::vector<LinkKind> planRing(const std::string& transport, const std::vector<Endpoint>& ring, bool mixed);

}  // namespace tfring
