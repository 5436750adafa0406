#include "transport/tcp_transport.h"

namespace tfring {
namespace {
constexpr size_t kBounceBytes = 1 << 20;
constexpr size_t kMaxIov = 1024;

PeerError lostConnection(int peer, const PeerError& e) {
  return PeerError(peer, "lost the connection to rank " + std::to_string(peer) + ": " + e.what());
}
}  // namespace

void TcpSendLink::start(const IoList& data) {
  out_.emplace(data);
  sent_ = 0;
  total_ = totalBytes(data);
}

bool TcpSendLink::progress() {
  if (done()) return false;
  IoList piece = out_->peek(total_ - sent_, kMaxIov);
  size_t n;
  try {
    n = sock_.sendSome(piece.data(), static_cast<int>(piece.size()));
  } catch (const PeerError& e) {
    throw lostConnection(peer_, e);
  }
  out_->advance(n);
  sent_ += n;
  return n > 0;
}

TcpRecvLink::TcpRecvLink(int peer, Socket sock)
    : RecvLink(LinkKind::kTcp, peer), sock_(std::move(sock)), bounce_(kBounceBytes) {}

bool TcpRecvLink::progress() {
  if (done()) return false;
  IoList dst = in_->next(in_->remaining(), kMaxIov);
  size_t n;
  try {
    n = sock_.recvSome(dst.data(), static_cast<int>(dst.size()));
  } catch (const PeerError& e) {
    throw lostConnection(peer_, e);
  }
  in_->commit(n);
  return n > 0;
}

}  // namespace tfring
