#include "transport/ring_links.h"

#include <poll.h>

#include <cstdio>
#include <cstring>
#include <list>
#include <vector>

#include "rendezvous/hmac.h"
#include "rendezvous/store_frame.h"

namespace tfring {
namespace {

constexpr size_t kMaxPending = 64;
constexpr size_t kAnswerBytes = sizeof(uint32_t) + kMacBytes;

Digest handshakeMac(const Config& c, int from, int to, const std::string& nonce) {
  std::string msg = "tfring-data|" + c.jobId + "|" + std::to_string(from) + "->" + std::to_string(to) + "|" + nonce;
  return hmacSha256(c.secret, msg.data(), msg.size());
}

// An incoming connection that has not proven who it is yet.
struct Pending {
  Socket sock;
  std::string peer;
  std::string nonce = randomBytes(kNonceBytes);
  std::string got;
  Deadline deadline;
};

void refuse(const Config& c, const Pending& p, const char* why) {
  std::fprintf(stderr, "tfring: rank %d refused a data connection from %s: %s\n", c.rank, p.peer.c_str(), why);
}

// Reads what `p` sent; returns true when it is the authenticated left neighbour.
bool answerOf(const Config& c, int left, Pending& p, bool* finished) {
  char buf[kAnswerBytes];
  size_t k = p.sock.recvSome(buf, kAnswerBytes - p.got.size());
  p.got.append(buf, k);
  *finished = p.got.size() == kAnswerBytes;
  if (!*finished) return false;
  const int who = static_cast<int>(getU32(p.got, 0));
  Digest mac;
  std::memcpy(mac.data(), p.got.data() + sizeof(uint32_t), kMacBytes);
  if (who == left && digestEqual(mac, handshakeMac(c, left, c.rank, p.nonce))) return true;
  refuse(c, p, "it did not carry the job secret");
  return false;
}

void acceptAll(const Config& c, const Socket& listener, std::list<Pending>& pending, double handshakeTimeout) {
  for (;;) {
    Socket s = listener.tryAccept();
    if (!s.valid()) return;
    Pending p{std::move(s), "", randomBytes(kNonceBytes), "", Deadline::after(handshakeTimeout)};
    p.peer = p.sock.peerAddress();
    try {
      p.sock.sendAll(p.nonce.data(), p.nonce.size(), Deadline::after(0));
    } catch (const Error&) {
      continue;
    }
    if (pending.size() >= kMaxPending) {
      refuse(c, pending.front(), "too many connections are waiting for their handshake (the oldest is dropped)");
      pending.pop_front();
    }
    pending.push_back(std::move(p));
  }
}

// Reads the right neighbour's nonce as it arrives and, once complete, answers with our rank and
// MAC. Returns true when answered.
bool answerRight(const Config& c, int right, const Socket& toRight, std::string* nonce, Deadline deadline) {
  char buf[kNonceBytes];
  nonce->append(buf, toRight.recvSome(buf, kNonceBytes - nonce->size()));
  if (nonce->size() < kNonceBytes) return false;
  std::string answer;
  putU32(&answer, static_cast<uint32_t>(c.rank));
  Digest mac = handshakeMac(c, c.rank, right, *nonce);
  answer.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  toRight.sendAll(answer.data(), answer.size(), deadline);
  return true;
}

// Reads what the pending connections sent (`revents` in their order); drops those that failed,
// finished or ran out of time, and moves the authenticated left neighbour into *fromLeft.
void serveIncoming(const Config& c, int left, const pollfd* revents, std::list<Pending>& pending, Socket* fromLeft) {
  for (auto it = pending.begin(); it != pending.end(); ++revents) {
    bool finished = false, drop = false;
    try {
      if (revents->revents && answerOf(c, left, *it, &finished)) *fromLeft = std::move(it->sock);
      drop = finished;
    } catch (const PeerError&) {
      drop = true;  // closed before finishing: a port scan, or a stranger giving up
    }
    if (!drop && it->deadline.expired()) {
      refuse(c, *it, "no handshake within the deadline");
      drop = true;
    }
    it = drop ? pending.erase(it) : std::next(it);
  }
}

[[noreturn]] void throwUnlinked(bool answered, int left, int right) {
  const int who = answered ? left : right;
  throw Error(Code::kDeadlineExceeded, std::string(answered ? "no authenticated connection from" : "no handshake from") +
                                           " rank " + std::to_string(who));
}

}  // namespace

RingLinks linkNeighbours(const Config& c, const Socket& listener, const std::string& rightHost, int rightPort,
                         Deadline deadline, double handshakeTimeout) {
  const int left = (c.rank + c.size - 1) % c.size, right = (c.rank + 1) % c.size;
  RingLinks links;
  links.toRight = Socket::connect(rightHost, rightPort, deadline);
  std::string rightNonce;
  bool answered = false;
  std::list<Pending> pending;
  while (!answered || !links.fromLeft.valid()) {
    if (deadline.expired()) throwUnlinked(answered, left, right);
    // [0] new connections, [1] the right neighbour's nonce, then the pending handshakes.
    std::vector<pollfd> fds{{listener.fd(), short(links.fromLeft.valid() ? 0 : POLLIN), 0},
                            {links.toRight.fd(), short(answered ? 0 : POLLIN), 0}};
    for (auto& p : pending) fds.push_back({p.sock.fd(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), deadline.remainingMs(50));
    if (!answered && fds[1].revents) answered = answerRight(c, right, links.toRight, &rightNonce, deadline);
    serveIncoming(c, left, fds.data() + 2, pending, &links.fromLeft);
    if (fds[0].revents) acceptAll(c, listener, pending, handshakeTimeout);
    if (links.fromLeft.valid()) pending.clear();
  }
  return links;
}

}  // namespace tfring
