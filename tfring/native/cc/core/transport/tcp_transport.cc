#include "transport/tcp_transport.h"

#include <errno.h>
#include <poll.h>

namespace tfring {
namespace {
constexpr size_t kBounceBytes = 1 << 20;
constexpr size_t kMaxIov = 1024;
}  // namespace

TcpTransport::TcpTransport(int rank, int left, int right, Socket toRight, Socket fromLeft)
    : Transport(rank, left, right),
      toRight_(std::move(toRight)),
      fromLeft_(std::move(fromLeft)),
      bounce_(kBounceBytes) {}

void TcpTransport::abort() {
  aborted_ = true;
  toRight_.shutdown();
  fromLeft_.shutdown();
}

void TcpTransport::sendRecv(const IoList& send, const RecvTarget& recv, Deadline deadline) {
  if (aborted_) throw PeerError(-1, "transport was aborted after an earlier failure");
  IovCursor out(send);
  const size_t sendBytes = totalBytes(send);
  RecvCursor in(recv, &bounce_);
  while (out.consumed() < sendBytes || !in.done()) {
    bool progressed = false;
    if (out.consumed() < sendBytes) {
      IoList piece = out.peek(sendBytes, kMaxIov);
      size_t n;
      try {
        n = toRight_.sendSome(piece.data(), static_cast<int>(piece.size()));
      } catch (const PeerError& e) {
        throw PeerError(right_, "lost the connection to rank " + std::to_string(right_) + ": " + e.what());
      }
      out.advance(n);
      progressed |= n > 0;
    }
    if (!in.done()) {
      IoList dst = in.next(in.remaining(), kMaxIov);
      size_t n;
      try {
        n = fromLeft_.recvSome(dst.data(), static_cast<int>(dst.size()));
      } catch (const PeerError& e) {
        throw PeerError(left_, "lost the connection to rank " + std::to_string(left_) + ": " + e.what());
      }
      in.commit(n);
      progressed |= n > 0;
    }
    if (progressed) continue;
    if (aborted_) throw PeerError(-1, "transport was aborted after an earlier failure");
    pollfd fds[2];
    int nfds = 0;
    if (out.consumed() < sendBytes) fds[nfds++] = {toRight_.fd(), POLLOUT, 0};
    if (!in.done()) fds[nfds++] = {fromLeft_.fd(), POLLIN, 0};
    int rc = ::poll(fds, nfds, deadline.remainingMs(200));
    if (rc < 0 && errno != EINTR) throw Error(Code::kInternal, "poll failed in TCP transport");
    if (rc == 0 && deadline.expired()) {
      int waitingOn = !in.done() ? left_ : right_;
      throw PeerError(waitingOn, "timed out waiting for rank " + std::to_string(waitingOn) +
                                     " (it stalled, or the ranks are out of step: different numbers of steps or collectives, e.g. datasets of different sizes)");
    }
  }
}

}  // namespace tfring
