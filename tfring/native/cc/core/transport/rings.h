// The rings a rank belongs to. Every collective can run on the world ring (all ranks in rank
// order). When allreduces go hierarchical (host_layout.h) a rank is also in the ring of the ranks
// on its host and in the ring of the ranks with its local index on every host; each is a
// Transport of its own, with its own links (rendezvous/bootstrap.h builds them).
#pragma once

#include <memory>
#include <string>

#include "transport/transport.h"

namespace tfring {

struct Rings {
  Rings() = default;
  Rings(std::unique_ptr<Transport> w) : world(std::move(w)) {}  // NOLINT: a world ring alone

  std::unique_ptr<Transport> world;  // null for a job of one rank
  std::unique_ptr<Transport> local;  // the hierarchical allreduce's rings, else null
  std::unique_ptr<Transport> cross;
  int localSize = 1;
  int hosts = 1;

  bool hierarchical() const { return local && cross; }
  // Fails every blocked and future call on every ring.
  void abort() {
    for (Transport* t : {world.get(), local.get(), cross.get()}) {
      if (t) t->abort();
    }
  }
  std::string name() const {
    if (!world) return "none (1 rank)";
    if (!hierarchical()) return world->name();
    return world->name() + "; allreduce hierarchical: " + local->name() + " inside a host, " + cross->name() +
           " across " + std::to_string(hosts) + " hosts";
  }
};

}  // namespace tfring
