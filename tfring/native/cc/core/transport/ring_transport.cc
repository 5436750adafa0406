#include "transport/ring_transport.h"

#include <errno.h>
#include <poll.h>

#include <chrono>
#include <cstdio>
#include <vector>

namespace tfring {
namespace {

constexpr int kDoorbellSleepMs = 50;  // a futex sleep also ends on a ring, so this only bounds checks
constexpr int kPollSliceMs = 200;     // sockets only: poll ends when one is ready
constexpr int kMixedSliceMs = 1;      // doorbell and sockets: neither can wake the other
// A peer from which nothing moved for this long when the collective's time ran out has stopped
// answering; one that moved later was merely slow.
constexpr double kQuietSeconds = 0.5;

[[noreturn]] void throwAborted() { throw PeerError(-1, "transport was aborted after an earlier failure"); }

// True when a socket is ready (or a signal interrupted the poll: the caller looks again).
bool pollSockets(std::vector<pollfd>& fds, int timeoutMs) {
  int rc = ::poll(fds.data(), fds.size(), timeoutMs);
  if (rc < 0 && errno != EINTR) throw Error(Code::kInternal, "poll failed in the ring transport");
  return rc != 0;
}

}  // namespace

RingTransport::RingTransport(int rank, int left, int right, std::unique_ptr<SendLink> toRight,
                             std::unique_ptr<RecvLink> fromLeft)
    : Transport(rank, left, right),
      toRight_(std::move(toRight)),
      fromLeft_(std::move(fromLeft)),
      doorbell_(toRight_->doorbell() ? toRight_->doorbell() : fromLeft_->doorbell()) {}

void RingTransport::abort() {
  aborted_ = true;
  toRight_->abort();
  fromLeft_->abort();
}

std::string RingTransport::name() const {
  if (toRight_->kind() == fromLeft_->kind()) return toRight_->name();
  return toRight_->name() + " to rank " + std::to_string(right_) + ", " + fromLeft_->name() + " from rank " +
         std::to_string(left_);
}

void RingTransport::sendRecv(const IoList& send, const RecvTarget& recv, Deadline deadline) {
  if (aborted_) throwAborted();
  toRight_->start(send);
  fromLeft_->start(recv);
  Clock::time_point lastMoved = Clock::now();
  for (;;) {
    // Read before looking at the links: a ring after this read ends the sleep below at once.
    const uint32_t seen = doorbell_ ? doorbell_->load(std::memory_order_acquire) : 0;
    if (toRight_->done() && fromLeft_->done()) return;
    bool progressed = toRight_->progress();
    progressed |= fromLeft_->progress();
    if (progressed) {
      lastMoved = Clock::now();
    } else {
      wait(seen, deadline, lastMoved);
    }
  }
}

void RingTransport::wait(uint32_t seen, Deadline deadline, Clock::time_point lastMoved) {
  if (aborted_) throwAborted();
  if (sleepUntilWoken(seen, deadline)) return;
  if (aborted_) throwAborted();
  checkPeers();
  if (!deadline.expired()) return;
  const int waitingOn = fromLeft_->done() ? right_ : left_;
  const double quiet = std::chrono::duration<double>(Clock::now() - lastMoved).count();
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.0f", quiet);
  // Nothing tells a stopped process from a hung or a busy one: a peer in its own code, out of
  // step with this rank, never comes to this collective either.
  if (quiet >= kQuietSeconds) {
    throw PeerError(waitingOn, "rank " + std::to_string(waitingOn) + " stopped answering for " + seconds +
                                   " s (it may be stopped, swapped out or hung, or busy outside tfring's collectives)");
  }
  throw PeerError(waitingOn, "the collective's time ran out while data from rank " + std::to_string(waitingOn) +
                                 " was still moving (a slow link or a very large collective: raise TFRING_TIMEOUT)");
}

bool RingTransport::sleepUntilWoken(uint32_t seen, Deadline deadline) {
  std::vector<pollfd> fds;
  if (!toRight_->done()) toRight_->addPollFds(&fds);
  if (!fromLeft_->done()) fromLeft_->addPollFds(&fds);
  if (fds.empty()) return sleepOnDoorbell(doorbell_, seen, kDoorbellSleepMs);
  // A mixed ring whose shared-memory link is done waits on its socket alone, asleep in poll.
  const bool bellMatters = (!toRight_->done() && toRight_->doorbell()) || (!fromLeft_->done() && fromLeft_->doorbell());
  if (!bellMatters) return pollSockets(fds, deadline.remainingMs(kPollSliceMs));
  return sleepOnDoorbell(doorbell_, seen, 0) || pollSockets(fds, kMixedSliceMs);
}

void RingTransport::checkPeers() const {
  fromLeft_->checkPeer();
  // Two ranks: both links lead to the same neighbour, and one check tells.
  if (right_ != left_) toRight_->checkPeer();
}

}  // namespace tfring
