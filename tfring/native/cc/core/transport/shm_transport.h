// Shared memory between ring neighbours on one host.
//
// Each rank owns one segment: a doorbell (a futex word) and an inbox ring that only its left
// neighbour writes. Messages are records in the ring:
//   EAGER  header + payload bytes (small messages, or when single-copy is not permitted);
//   CMA    header + the sender's (address, length) pieces: the receiver copies the payload
//          straight out of the sender's memory with process_vm_readv — one copy, no staging,
//          which is what puts OpenMPI's vader transport near the memory-bandwidth bound —
//          then publishes how many bytes it took (`acked`), which releases the sender.
// Whoever changes something a rank waits on rings that rank's doorbell; a rank with nothing to
// do sleeps on its own doorbell (futex with a short timeout). The TCP connections from bootstrap
// stay open beside the segments: a neighbour that dies closes them, which is how a waiting rank
// learns of the death within ~100 ms instead of at its timeout.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "transport/socket.h"
#include "transport/transport.h"

namespace tfring {

struct ShmHeader;

// One rank's mapped segment.
class ShmSegment {
 public:
  static std::unique_ptr<ShmSegment> create(const std::string& name);
  static std::unique_ptr<ShmSegment> open(const std::string& name);
  ~ShmSegment();
  // Removes the name; mappings stay valid. Called once every peer has mapped it, so a killed job
  // leaves nothing behind in /dev/shm.
  void unlink();
  ShmHeader* header() const { return header_; }
  uint8_t* ring() const;
  // Address of a magic word the right neighbour reads to test single-copy access.
  const uint64_t* probeAddress() const;

 private:
  ShmSegment(std::string name, void* base, bool owner);
  std::string name_;
  void* base_;
  ShmHeader* header_;
  bool owner_;
  bool unlinked_ = false;
};

class ShmTransport : public Transport {
 public:
  // `mine` is this rank's segment, `leftSeg` / `rightSeg` the neighbours'; `leftPid` is the left
  // neighbour's pid (single-copy reads come from it). The sockets are only watched for closure.
  ShmTransport(int rank, int left, int right, std::unique_ptr<ShmSegment> mine,
               std::unique_ptr<ShmSegment> leftSeg, std::unique_ptr<ShmSegment> rightSeg,
               int leftPid, Socket toRight, Socket fromLeft);
  // Tests whether this process may read the left neighbour's memory (`probe` is its probe
  // address; null turns single-copy off) and records the answer in our segment for the left
  // neighbour to see.
  void probeSingleCopy(const uint64_t* probe);
  // True when the right neighbour said it can read our memory.
  bool sendsSingleCopy() const;
  void sendRecv(const IoList& send, const RecvTarget& recv, Deadline deadline) override;
  void abort() override;
  std::string name() const override;

 private:
  bool progressSend(IovCursor& out, size_t sendBytes, bool cma, uint64_t* ackTarget);
  bool progressRecv(RecvCursor& in);
  void wait(uint32_t seen, Deadline deadline, int waitingOn);
  static void ringBell(ShmHeader* h);

  std::unique_ptr<ShmSegment> mine_, leftSeg_, rightSeg_;
  int leftPid_;
  Socket toRight_, fromLeft_;
  std::vector<uint8_t> bounce_;
  // Receiver state of the record being consumed.
  uint32_t curKind_ = 0;
  uint64_t curLeft_ = 0;
  IoList curRemote_;
  size_t curRemoteOff_ = 0;
  uint64_t sentPayload_ = 0;  // cumulative payload bytes sent to the right neighbour
  uint64_t recvPayload_ = 0;  // cumulative payload bytes received from the left neighbour
  std::atomic<bool> aborted_{false};
};

}  // namespace tfring
