// TCP to a ring neighbour: the connection to the right neighbour (we only send on it) or the one
// from the left neighbour (we only receive on it), both from the authenticated handshake of
// ring_links.h. Sockets are non-blocking; the RingTransport polls them when neither link moves,
// so a send that fills the kernel buffer never blocks a receive, and a reduction of one received
// piece runs while the kernel keeps moving the next ones.
#pragma once

#include <optional>
#include <vector>

#include "transport/link.h"
#include "transport/socket.h"

namespace tfring {

class TcpSendLink : public SendLink {
 public:
  TcpSendLink(int peer, Socket sock) : SendLink(LinkKind::kTcp, peer), sock_(std::move(sock)) {}
  void start(const IoList& data) override;
  bool progress() override;
  bool done() const override { return sent_ == total_; }
  void addPollFds(std::vector<pollfd>* fds) const override { fds->push_back({sock_.fd(), POLLOUT, 0}); }
  void abort() override { sock_.shutdown(); }
  std::string name() const override { return "tcp"; }

 private:
  Socket sock_;
  std::optional<IovCursor> out_;
  size_t sent_ = 0;
  size_t total_ = 0;
};

class TcpRecvLink : public RecvLink {
 public:
  TcpRecvLink(int peer, Socket sock);
  void start(const RecvTarget& target) override { in_.emplace(target, &bounce_); }
  bool progress() override;
  bool done() const override { return !in_ || in_->done(); }
  void addPollFds(std::vector<pollfd>* fds) const override { fds->push_back({sock_.fd(), POLLIN, 0}); }
  void abort() override { sock_.shutdown(); }
  std::string name() const override { return "tcp"; }

 private:
  Socket sock_;
  std::vector<uint8_t> bounce_;
  std::optional<RecvCursor> in_;
};

}  // namespace tfring
