// Builds this rank's Transport: publishes how to reach us in the store, connects to the right ring
// neighbour, accepts the left one (each data connection is authenticated with the job secret),
// and chooses shared memory when every rank runs on this host, TCP otherwise.
#pragma once

#include <memory>

#include "config.h"
#include "rendezvous/store.h"
#include "transport/transport.h"

namespace tfring {

// Returns null for a job of one rank. Throws kDeadlineExceeded naming the ranks that did not
// show up within config.rendezvousTimeout.
std::unique_ptr<Transport> connectRing(const Config& config, Store& store);

// Every rank calls it with the same name; returns when all have.
void storeBarrier(Store& store, const std::string& name, int rank, int size, Deadline deadline);

}  // namespace tfring
