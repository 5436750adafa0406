#include "transport/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace tfring {
namespace {

std::string errnoText(const std::string& what) { return what + ": " + std::strerror(errno); }

void setNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Large buffers let a whole pipeline segment sit in the kernel while the receiver reduces.
  int bytes = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  // A peer host that stops answering (cut off, powered down) closes nothing: a rank waiting to
  // receive from it would wait out the collective timeout. Probing an idle connection after 2 s,
  // every second, 3 times, fails it within about 5 s instead. A live host's kernel answers the
  // probes however busy or stopped its rank is, so a slow step is never taken for a lost host.
  int idle = 2, interval = 1, count = 3;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

// Waits until fd is ready for `events` or the deadline passes.
void waitFor(int fd, short events, Deadline deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = deadline.remainingMs(1000);
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR) throw Error(Code::kInternal, errnoText(std::string("poll ") + what));
    if (deadline.expired()) {
      throw Error(Code::kDeadlineExceeded, std::string("timed out waiting to ") + what);
    }
  }
}

// Fills `addr` for host:port; returns getaddrinfo's error (0 on success).
int tryResolve(const std::string& host, int port, sockaddr_in* addr) {
  *addr = sockaddr_in{};
  addr->sin_family = AF_INET;
  addr->sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr->sin_addr) == 1) return 0;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) return rc != 0 ? rc : EAI_NONAME;
  addr->sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return 0;
}

sockaddr_in resolve(const std::string& host, int port) {
  sockaddr_in addr{};
  if (int rc = tryResolve(host, port, &addr)) {
    throw Error(Code::kInvalidArgument, "cannot resolve host '" + host + "' (" + gai_strerror(rc) + ")");
  }
  return addr;
}

}  // namespace

// A name that does not resolve yet is retried until the deadline, like a refused connection: under
// Kubernetes a pod's DNS name appears only once the pod runs, and the other ranks may start first.
Socket Socket::connect(const std::string& host, int port, Deadline deadline) {
  std::string lastError = "no attempt";
  while (!deadline.expired()) {
    sockaddr_in addr{};
    if (int rc = tryResolve(host, port, &addr)) {
      lastError = std::string("cannot resolve host '") + host + "': " + gai_strerror(rc);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw Error(Code::kInternal, errnoText("socket"));
    Socket s(fd);
    tune(fd);
    setNonBlocking(fd);
    int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    if (rc == 0) return s;
    if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int prc = ::poll(&p, 1, deadline.remainingMs(1000));
      if (prc > 0) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0) return s;
        lastError = std::strerror(err);
      } else {
        lastError = "connect timed out";
      }
    } else {
      lastError = std::strerror(errno);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw Error(Code::kDeadlineExceeded, "could not connect to " + host + ":" + std::to_string(port) +
                                           " before the deadline (" + lastError + ")");
}

Socket Socket::listen(const std::string& host, int port, int backlog) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(Code::kInternal, errnoText("socket"));
  Socket s(fd);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr = resolve(host.empty() ? "0.0.0.0" : host, port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw Error(Code::kUnavailable,
                errnoText("cannot listen on " + host + ":" + std::to_string(port)));
  }
  if (::listen(fd, backlog) != 0) throw Error(Code::kInternal, errnoText("listen"));
  setNonBlocking(fd);
  return s;
}

Socket Socket::accept(Deadline deadline) const {
  for (;;) {
    waitFor(fd_, POLLIN, deadline, "accept a connection");
    Socket s = tryAccept();
    if (s.valid()) return s;
  }
}

Socket Socket::tryAccept() const {
  for (;;) {
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      tune(fd);
      return Socket(fd);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Socket();
    throw Error(Code::kUnavailable, errnoText("accept"));
  }
}

void Socket::sendAll(const void* data, size_t n, Deadline deadline) const {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    iovec iov{const_cast<char*>(p), n};
    size_t k = sendSome(&iov, 1);
    if (k == 0) {
      waitFor(fd_, POLLOUT, deadline, "send");
      continue;
    }
    p += k;
    n -= k;
  }
}

void Socket::recvAll(void* data, size_t n, Deadline deadline) const {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    size_t k = recvSome(p, n);
    if (k == 0) {
      waitFor(fd_, POLLIN, deadline, "receive");
      continue;
    }
    p += k;
    n -= k;
  }
}

size_t Socket::sendSome(const iovec* iov, int iovcnt) const {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(iovcnt);
  for (;;) {
    ssize_t rc = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (rc >= 0) return static_cast<size_t>(rc);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    throw PeerError(-1, errnoText("connection lost while sending"));
  }
}

size_t Socket::recvSome(void* data, size_t n) const {
  iovec iov{data, n};
  return recvSome(&iov, 1);
}

size_t Socket::recvSome(const iovec* iov, int iovcnt) const {
  size_t n = 0;
  for (int i = 0; i < iovcnt; ++i) n += iov[i].iov_len;
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(iovcnt);
  for (;;) {
    ssize_t rc = ::recvmsg(fd_, &msg, MSG_DONTWAIT);
    if (rc > 0) return static_cast<size_t>(rc);
    if (rc == 0) {
      if (n == 0) return 0;
      throw PeerError(-1, "connection closed by peer");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    throw PeerError(-1, errnoText("connection lost while receiving"));
  }
}

bool Socket::peerClosed() const {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR)) return true;
  char c;
  ssize_t rc = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return rc == 0 || (rc < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

int Socket::port() const {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

std::string Socket::peerAddress() const {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  char buf[INET_ADDRSTRLEN] = {0};
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof(buf)) == nullptr) {
    return "unknown peer";
  }
  return std::string(buf) + ":" + std::to_string(ntohs(addr.sin_port));
}

void Socket::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void Socket::shutdown() const {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

std::string defaultHostAddress() {
  ifaddrs* list = nullptr;
  std::string best = "127.0.0.1";
  if (getifaddrs(&list) != 0) return best;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, buf, sizeof(buf));
    if (std::strncmp(buf, "127.", 4) != 0) {
      best = buf;
      break;
    }
  }
  freeifaddrs(list);
  return best;
}

}  // namespace tfring
