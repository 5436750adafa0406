// A TCP socket with deadlines on every blocking call. Used by the rendezvous store and by the
// TCP transport; it knows nothing about what the bytes mean.
#pragma once

#include <sys/uio.h>

#include <string>
#include <utility>

#include "common.h"

namespace tfring {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      close();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Connects, retrying refused connections until the deadline (the peer may not listen yet).
  static Socket connect(const std::string& host, int port, Deadline deadline);
  // Listens on host:port (port 0: any free port).
  static Socket listen(const std::string& host, int port, int backlog = 64);
  // Waits for one connection; throws kDeadlineExceeded when none arrives in time.
  Socket accept(Deadline deadline) const;
  // One waiting connection, or an invalid Socket when none is queued (never blocks).
  Socket tryAccept() const;

  void sendAll(const void* data, size_t n, Deadline deadline) const;
  void recvAll(void* data, size_t n, Deadline deadline) const;

  // Non-blocking halves for poll loops: bytes moved (0 when the call would block).
  // recvSome throws PeerError when the peer closed the connection.
  size_t sendSome(const iovec* iov, int iovcnt) const;
  size_t recvSome(void* data, size_t n) const;
  size_t recvSome(const iovec* iov, int iovcnt) const;

  // True when the peer has closed its end (non-blocking check; never consumes data).
  bool peerClosed() const;

  int port() const;
  // "a.b.c.d:port" of the other end, or "unknown peer".
  std::string peerAddress() const;
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  // Wakes any thread blocked on this socket (used to abort) without closing the descriptor.
  void shutdown() const;

 private:
  int fd_ = -1;
};

// The first non-loopback IPv4 address of this host, or 127.0.0.1.
std::string defaultHostAddress();

}  // namespace tfring
