// Builds this rank's Transport (the ring handshake): publishes how to reach us in the store,
// checks that every rank runs with the same wire settings, plans which transport carries each
// link of the ring (transport/link_choice.h), connects to the right neighbour and accepts the
// left one (each data connection authenticated with the job secret, transport/ring_links.h), and
// sets up shared memory where a link uses it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "rendezvous/store.h"
#include "transport/rings.h"
#include "transport/transport.h"

namespace tfring {

// Returns null for a job of one rank. Throws kDeadlineExceeded naming the ranks that did not
// show up within config.rendezvousTimeout. Ranks whose host identities are equal
// (transport/host_identity.h: config.hostId, else detected) count as one host and may share
// memory; tests give thread-ranks different host ids to build rings spanning several "hosts".
std::unique_ptr<Transport> connectRing(const Config& config, Store& store);

// The world ring, and when allreduces go hierarchical (transport/host_layout.h decides from the
// host identities and config.allreduceAlgorithm) the ring inside this rank's host and the one
// across hosts. Throws as connectRing does, and kInvalidArgument when allreduce_algorithm is
// hierarchical but the layout cannot be.
Rings connectRings(const Config& config, Store& store);

// The ring of a process set (process_sets.h): `members` are job ranks in ring order, this rank
// among them; every member calls this with the same `name` and `members`. Throws as connectRing.
std::unique_ptr<Transport> connectProcessSet(const Config& config, Store& store, const std::string& name,
                                             const std::vector<int>& members);

// `config` as a ring over `members` sees it: rank and size become this rank's position and the
// member count, and the job id (which names shared-memory segments) gains `name`.
Config subringConfig(const Config& config, const std::string& name, const std::vector<int>& members);

}  // namespace tfring
