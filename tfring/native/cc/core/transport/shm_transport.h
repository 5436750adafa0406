// Shared memory to a ring neighbour on this host.
//
// The receiver's segment (shm_segment.h) holds its inbox, a ring only the sender writes. Messages
// are records in it:
//   EAGER  header + payload bytes (small messages, or when single-copy is not permitted);
//   CMA    header + the sender's (address, length) pieces: the receiver copies the payload
//          straight out of the sender's memory with process_vm_readv — one copy, no staging,
//          which is what puts OpenMPI's vader transport near the memory-bandwidth bound —
//          then publishes how many bytes it took (`acked`), which releases the sender.
// Whoever changes something a rank waits on rings that rank's doorbell: the sender rings the
// receiver's after writing a record, the receiver the sender's after consuming one. The TCP
// connection from the handshake stays open beside the link: a neighbour that dies closes it,
// which is how a waiting rank learns of the death within ~100 ms instead of at its timeout.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/link.h"
#include "transport/shm_segment.h"
#include "transport/socket.h"

namespace tfring {

class ShmSendLink : public SendLink {
 public:
  // `mine` is this rank's segment (its doorbell wakes us), `peerSeg` the receiver's. The socket
  // is only watched for closure.
  ShmSendLink(int peer, std::shared_ptr<ShmSegment> mine, std::unique_ptr<ShmSegment> peerSeg, Socket sock);
  void start(const IoList& data) override;
  bool progress() override;
  bool done() const override;
  Doorbell* doorbell() const override { return &mine_->header()->doorbell; }
  void checkPeer() const override;
  void abort() override;
  std::string name() const override { return sendsSingleCopy() ? "shm (single-copy)" : "shm"; }
  // True when the receiver said it can read our memory.
  bool sendsSingleCopy() const;

 private:
  size_t sent() const { return out_ ? out_->consumed() : 0; }
  bool sendCma(size_t remaining, uint64_t head, size_t space);
  bool sendEager(size_t remaining, uint64_t head, size_t space);

  std::shared_ptr<ShmSegment> mine_;
  std::unique_ptr<ShmSegment> peerSeg_;
  Socket sock_;
  std::optional<IovCursor> out_;
  size_t total_ = 0;
  bool cma_ = false;
  uint64_t ackTarget_ = 0;    // `acked` the receiver must reach before a CMA send is done
  uint64_t sentPayload_ = 0;  // cumulative payload bytes sent
};

class ShmRecvLink : public RecvLink {
 public:
  // `mine` holds our inbox, `peerSeg` is the sender's (we ring its doorbell); `peerPid` is the
  // sender's pid, where single-copy reads come from. The socket is only watched for closure.
  ShmRecvLink(int peer, std::shared_ptr<ShmSegment> mine, std::unique_ptr<ShmSegment> peerSeg, int peerPid,
              Socket sock);
  // Tests whether this process may read the sender's memory (`probe` is its probe address; null
  // turns single-copy off) and records the answer in our segment for the sender to see.
  void probeSingleCopy(const uint64_t* probe);
  void start(const RecvTarget& target) override;
  bool progress() override;
  bool done() const override { return !in_ || in_->done(); }
  Doorbell* doorbell() const override { return &mine_->header()->doorbell; }
  void checkPeer() const override;
  void abort() override;
  std::string name() const override;

 private:
  bool takeRecord();
  bool receiveEager();
  void receiveCma();

  std::shared_ptr<ShmSegment> mine_;
  std::unique_ptr<ShmSegment> peerSeg_;
  int peerPid_;
  Socket sock_;
  std::vector<uint8_t> bounce_;
  std::optional<RecvCursor> in_;
  // The record being consumed.
  uint32_t curKind_ = 0;
  uint64_t curLeft_ = 0;
  IoList curRemote_;
  size_t curRemoteOff_ = 0;
  uint64_t recvPayload_ = 0;  // cumulative payload bytes received
};

}  // namespace tfring
