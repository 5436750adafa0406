// Waiting in the store for a key from every rank: how ranks exchange what they publish at
// rendezvous (addresses, settings) and how they meet at a barrier. While some ranks are missing,
// a line on stderr every kReportEverySeconds says which: under mpirun or srun nothing else would
// tell why a job does not start.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common.h"
#include "config.h"
#include "rendezvous/store.h"

namespace tfring {

// The value every rank put under key(r), in rank order. `what` completes "waiting for rank 3 to
// ..." in reports and errors; c's rank, size and store address go into them too. Throws
// kDeadlineExceeded naming the missing ranks.
std::vector<std::string> gatherFromRanks(Store& store, const Config& c, const std::string& what,
                                         const std::function<std::string(int)>& key, Deadline deadline);

// Every rank calls it with the same name; returns when all have.
void storeBarrier(Store& store, const std::string& name, int rank, int size, Deadline deadline);

// The last store request of a rendezvous. Rank 0 serves the store and may exit as soon as its own
// init returns (a script that only initialises), so it returns only once every other rank has said
// it is done with the store; the others return at once.
void leaveRendezvous(Store& store, const Config& c, Deadline deadline);

}  // namespace tfring
