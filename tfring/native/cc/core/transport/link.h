// One direction of one ring link: what a rank sends to its right neighbour (SendLink) or receives
// from its left one (RecvLink). A RingTransport (ring_transport.h) is one of each, and each may be
// carried differently: shared memory to a neighbour on this host, TCP to one on another host, in
// the same ring (link_choice.h decides which).
//
// Links never block. progress() moves what it can at once and says whether anything moved; when
// neither link of a rank can move, the RingTransport sleeps on what its links name (a socket to
// poll, the rank's shared-memory doorbell) until one of them can.
#pragma once

#include <poll.h>

#include <string>
#include <vector>

#include "transport/doorbell.h"
#include "transport/transport.h"

namespace tfring {

enum class LinkKind { kShm, kTcp };

inline const char* linkKindName(LinkKind k) { return k == LinkKind::kShm ? "shm" : "tcp"; }

class Link {
 public:
  Link(LinkKind kind, int peer) : kind_(kind), peer_(peer) {}
  virtual ~Link() = default;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  LinkKind kind() const { return kind_; }
  int peer() const { return peer_; }
  // Moves what it can without blocking; true when anything moved.
  virtual bool progress() = 0;
  // The current message is complete (true before the first one, too).
  virtual bool done() const = 0;
  // What wakes a rank waiting on this link: sockets to poll (added while not done) ...
  virtual void addPollFds(std::vector<pollfd>* fds) const { (void)fds; }
  // ... or the rank's own doorbell, which neighbours ring when they change something it waits on.
  virtual Doorbell* doorbell() const { return nullptr; }
  // Throws PeerError when the neighbour is known to be gone. Links whose reads and writes fail
  // when the neighbour dies (TCP) have nothing to check.
  virtual void checkPeer() const {}
  // Wakes whoever waits on this link, for good; safe to call from another thread.
  virtual void abort() = 0;
  // "tcp", "shm" or "shm (single-copy)".
  virtual std::string name() const = 0;

 protected:
  const LinkKind kind_;
  const int peer_;
};

class SendLink : public Link {
 public:
  using Link::Link;
  // Begins a message; `data` must stay valid until done(). Done means every byte has left (and,
  // where the neighbour reads our memory directly, has been read).
  virtual void start(const IoList& data) = 0;
};

class RecvLink : public Link {
 public:
  using Link::Link;
  // Begins a message; `target` must stay valid until done().
  virtual void start(const RecvTarget& target) = 0;
};

}  // namespace tfring
