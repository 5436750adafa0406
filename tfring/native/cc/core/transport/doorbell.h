// A futex word a rank sleeps on while its shared-memory links cannot move, and that its
// neighbours ring whenever they change something it waits on (a record in its inbox, an
// acknowledgement of a single-copy send). It lives in the rank's segment (shm_segment.h), so
// processes on one host can ring each other's.
#pragma once

#include <atomic>
#include <cstdint>

namespace tfring {

using Doorbell = std::atomic<uint32_t>;

// Wakes every sleeper.
void ringDoorbell(Doorbell* bell);

// Returns true as soon as the bell differs from `seen`, false after about `timeoutMs` without a
// ring. A short spin comes first: it catches a neighbour's answer without a sleep when both ranks
// have a core. timeoutMs = 0 only spins.
bool sleepOnDoorbell(Doorbell* bell, uint32_t seen, int timeoutMs);

}  // namespace tfring
