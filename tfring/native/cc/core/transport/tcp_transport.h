// TCP between ring neighbours: one connection to the right neighbour (we send on it) and one from
// the left neighbour (we receive on it). sendRecv is a single poll loop over both sockets, so a
// send that fills the kernel buffer never blocks a receive, and a reduction of one received piece
// runs while the kernel keeps moving the next ones.
#pragma once

#include <atomic>
#include <vector>

#include "transport/socket.h"
#include "transport/transport.h"

namespace tfring {

class TcpTransport : public Transport {
 public:
  TcpTransport(int rank, int left, int right, Socket toRight, Socket fromLeft);
  void sendRecv(const IoList& send, const RecvTarget& recv, Deadline deadline) override;
  void abort() override;
  std::string name() const override { return "tcp"; }

 private:
  Socket toRight_;
  Socket fromLeft_;
  std::vector<uint8_t> bounce_;
  std::atomic<bool> aborted_{false};
};

}  // namespace tfring
