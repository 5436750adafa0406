// The data plane between ring neighbours. An algorithm sees only this interface: it never knows
// whether bytes travel over TCP or shared memory (the Gloo split of algorithm and transport).
//
// A rank talks to two neighbours: it sends to the right one and receives from the left one
// (left == right when there are two ranks). The one primitive, sendRecv, does both at once,
// which is what every ring step needs and what keeps two ranks from both blocking in send.
#pragma once

#include <sys/uio.h>

#include <functional>
#include <string>
#include <vector>

#include "common.h"

namespace tfring {

using IoList = std::vector<iovec>;

size_t totalBytes(const IoList& v);
// The bytes [offset, offset + length) of the logical concatenation of `v`.
IoList sliceIo(const IoList& v, size_t offset, size_t length);

// Walks an IoList front to back, handing out pieces of bounded size and count.
class IovCursor {
 public:
  explicit IovCursor(const IoList& v) : v_(&v) {}
  // Up to maxBytes bytes in at most maxIov pieces, starting at the cursor; does not advance.
  IoList peek(size_t maxBytes, size_t maxIov = 1024) const;
  void advance(size_t n);
  size_t consumed() const { return consumed_; }

 private:
  const IoList* v_;
  size_t idx_ = 0;
  size_t off_ = 0;
  size_t consumed_ = 0;
};

// Where received bytes go. Either they land in `into` (a list of destination pieces), or, when
// `consume` is set, they pass through a bounce buffer and `consume(data, offset, len)` is called
// for each piece as it arrives: offset counts from the start of the message, len is a multiple of
// `unit` (the element size) so a reduction never sees half an element. This is how a reduction
// overlaps with the transfer of later pieces.
//
// A message whose length the sender decides (a framed message: a fixed-size header that says how
// long the rest is) sets `more` instead of `consume`: `into` then receives the `bytes`-long header,
// which must land in into[0], and once it is in, `more(header)` returns where the rest goes (an
// empty list when nothing follows). Links only ever read up to what the cursor still expects, so
// the header is read before a byte of what follows it.
struct RecvTarget {
  IoList into;
  size_t bytes = 0;
  size_t unit = 1;
  std::function<void(const uint8_t* data, size_t offset, size_t len)> consume;
  std::function<IoList(const uint8_t* header)> more;
};

// Turns raw incoming bytes into RecvTarget deliveries; shared by the transports.
class RecvCursor {
 public:
  RecvCursor(const RecvTarget& target, std::vector<uint8_t>* bounce);
  RecvCursor(const RecvCursor&) = delete;  // into_ points at our own list
  RecvCursor& operator=(const RecvCursor&) = delete;
  bool done() const { return committed_ == total_; }
  size_t remaining() const { return total_ - committed_; }
  // Where the next (at most maxBytes) bytes should be written.
  IoList next(size_t maxBytes, size_t maxIov = 1024);
  // `n` bytes were written into the pieces last returned by next().
  void commit(size_t n);
  // Copies n bytes from src (convenience: next + memcpy + commit).
  void write(const void* src, size_t n);

 private:
  // Calls target_.more once the header is in (framed messages only).
  void askForMore();

  const RecvTarget& target_;
  std::vector<uint8_t>* bounce_;
  IoList pieces_;          // target_.into, then what target_.more added
  IovCursor into_;
  size_t total_;           // bytes expected: target_.bytes, plus what more() added
  bool asked_ = false;     // more() has run
  size_t committed_ = 0;   // bytes received
  size_t filled_ = 0;      // bytes sitting in the bounce buffer, not yet delivered
  size_t delivered_ = 0;   // bytes handed to consume
};

class Transport {
 public:
  Transport(int rank, int left, int right) : rank_(rank), left_(left), right_(right) {}
  virtual ~Transport() = default;

  // Sends `send` to the right neighbour while receiving `recv` from the left neighbour; either
  // may be empty. Returns when both are complete. Throws PeerError naming the neighbour that
  // failed or stalled past the deadline.
  virtual void sendRecv(const IoList& send, const RecvTarget& recv, Deadline deadline) = 0;
  // Fails every blocked and future call at once (the engine calls it when a collective fails,
  // so neighbours see the failure instead of waiting out their timeout).
  virtual void abort() = 0;
  virtual std::string name() const = 0;

  // This rank's position in the ring (its job rank in the world ring); left() and right() are
  // the neighbours' job ranks, for messages only: in a sub-ring (a host's, a process set's) they
  // are not positions, so algorithms count in rank() and the ring's size.
  int rank() const { return rank_; }
  int left() const { return left_; }
  int right() const { return right_; }

 protected:
  int rank_, left_, right_;
};

}  // namespace tfring
