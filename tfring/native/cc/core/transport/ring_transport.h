// A rank's Transport: a SendLink to its right neighbour and a RecvLink from its left one, each
// carried by whatever suits that neighbour (link_choice.h), so that one ring can mix shared
// memory and TCP. sendRecv drives both links in one loop, which is what keeps two ranks from
// both blocking in send, and lets a reduction of one received piece overlap the next transfer.
//
// Waiting: when neither link can move, the rank sleeps on what the links name. Shared-memory
// links share the rank's doorbell (a futex), TCP links have sockets to poll. A rank with links of
// both kinds cannot sleep on both at once, so it looks at the doorbell and polls its sockets for a
// millisecond in turn.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "transport/link.h"
#include "transport/transport.h"

namespace tfring {

class RingTransport : public Transport {
 public:
  RingTransport(int rank, int left, int right, std::unique_ptr<SendLink> toRight, std::unique_ptr<RecvLink> fromLeft);
  void sendRecv(const IoList& send, const RecvTarget& recv, Deadline deadline) override;
  void abort() override;
  // The links' name when both are of one kind ("shm (single-copy)", "tcp"), else both, e.g.
  // "tcp to rank 2, shm from rank 0".
  std::string name() const override;
  const SendLink& toRight() const { return *toRight_; }
  const RecvLink& fromLeft() const { return *fromLeft_; }

 private:
  // Sleeps until a link may move again; throws PeerError when a neighbour is gone or the
  // deadline passed, naming the neighbour this rank waits on and how long nothing moved since
  // `lastMoved`.
  void wait(uint32_t seen, Deadline deadline, Clock::time_point lastMoved);
  bool sleepUntilWoken(uint32_t seen, Deadline deadline);
  void checkPeers() const;

  std::unique_ptr<SendLink> toRight_;
  std::unique_ptr<RecvLink> fromLeft_;
  Doorbell* doorbell_;  // this rank's, when a link is shared memory; else null
  std::atomic<bool> aborted_{false};
};

}  // namespace tfring
