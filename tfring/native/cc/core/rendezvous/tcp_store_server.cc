#include "rendezvous/tcp_store_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "rendezvous/store_frame.h"

namespace tfring {
namespace {

constexpr int kPollSliceMs = 50;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

struct TcpStoreServer::Connection {
  Socket sock;
  std::string peer;
  std::string nonce = randomBytes(kNonceBytes);
  uint64_t seq = 0;
  bool authenticated = false;
  Clock::time_point accepted = Clock::now();
  Clock::time_point busySince{};  // first byte of the frame being read, or the reply being sent
  std::string in;                 // the frame being read (never more than one)
  std::string out;                // the reply being sent
  size_t outAt = 0;
  bool waiting = false;           // a get waits for `waitKey` until `waitUntil`
  std::string waitKey;
  Clock::time_point waitUntil{};
  bool dead = false;

  bool busy() const { return !in.empty() || outAt < out.size(); }
  bool readable() const { return !waiting && outAt >= out.size(); }
};

TcpStoreServer::TcpStoreServer(const std::string& host, int port, std::string secret, Limits limits)
    : secret_(std::move(secret)), limits_(limits), listener_(Socket::listen(host, port, 256)),
      port_(listener_.port()) {
  thread_ = std::thread([this] { loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void TcpStoreServer::loop() {
  while (!stop_) {
    try {
      poll(kPollSliceMs);
      expire();
      conns_.remove_if([](const std::unique_ptr<Connection>& c) { return c->dead; });
    } catch (const std::exception& e) {  // never let one connection take rank 0 down
      std::fprintf(stderr, "tfring: rendezvous store: %s (serving on)\n", e.what());
    }
  }
}

void TcpStoreServer::poll(int timeoutMs) {
  std::vector<pollfd> fds;
  std::vector<Connection*> who;
  const bool accepting = Clock::now() >= acceptPausedUntil_;
  if (accepting) fds.push_back({listener_.fd(), POLLIN, 0});
  for (auto& c : conns_) {
    if (c->dead) continue;
    short events = (c->readable() ? POLLIN : 0) | (c->outAt < c->out.size() ? POLLOUT : 0);
    if (events == 0) continue;
    fds.push_back({c->sock.fd(), events, 0});
    who.push_back(c.get());
  }
  if (::poll(fds.data(), fds.size(), timeoutMs) <= 0) return;
  const size_t first = accepting ? 1 : 0;
  for (size_t i = first; i < fds.size(); ++i) {
    Connection& c = *who[i - first];
    if (fds[i].revents == 0) continue;
    try {
      bool ok = (fds[i].revents & POLLOUT) ? flush(c) : true;
      if (ok && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) ok = readFrom(c);
      c.dead = c.dead || !ok;
    } catch (const PeerError&) {
      c.dead = true;  // the client went away; its rank reports that, not the store
    }
  }
  if (accepting && (fds[0].revents & POLLIN)) acceptAll();
}

void TcpStoreServer::acceptAll() {
  for (;;) {
    Socket s;
    try {
      s = listener_.tryAccept();
    } catch (const Error& e) {  // out of descriptors or memory: let the next poll slices retry
      acceptPausedUntil_ = Clock::now() + std::chrono::milliseconds(100);
      std::fprintf(stderr, "tfring: rendezvous store: %s; pausing accept for 100 ms\n", e.what());
      return;
    }
    if (!s.valid()) return;
    auto c = std::make_unique<Connection>();
    c->sock = std::move(s);
    c->peer = c->sock.peerAddress();
    size_t unauthenticated = 0;
    for (auto& o : conns_) unauthenticated += (!o->authenticated && !o->dead);
    if (unauthenticated >= limits_.maxUnauthenticated) {
      for (auto& o : conns_) {
        if (!o->authenticated && !o->dead) {
          refuse(*o, "too many connections that have not authenticated (the oldest is dropped)");
          o->dead = true;
          o->sock.close();
          break;
        }
      }
    }
    try {
      c->sock.sendAll(c->nonce.data(), c->nonce.size(), Deadline::after(0));  // fits any socket buffer
      conns_.push_back(std::move(c));
    } catch (const Error&) {
    }
  }
}

size_t TcpStoreServer::frameLimit(const Connection& c) const {
  if (!c.authenticated) return limits_.maxUnauthenticatedFrame;
  if (c.in.size() <= kFrameHeaderBytes) return limits_.maxValueFrame;  // the op is not known yet
  return c.in[kFrameHeaderBytes] == 'S' ? limits_.maxValueFrame : limits_.maxKeyFrame;
}

// Reads at most the rest of one frame; handles it when complete. False: drop the connection.
bool TcpStoreServer::readFrom(Connection& c) {
  const size_t len = getU32(c.in, 0);
  const size_t want = c.in.size() < kFrameHeaderBytes ? kFrameHeaderBytes - c.in.size()
                                                      : kFrameHeaderBytes + len + kMacBytes - c.in.size();
  char buf[64 << 10];
  size_t got = c.sock.recvSome(buf, std::min(want, sizeof(buf)));
  if (got == 0) return true;  // nothing after all (recvSome throws when the peer closed)
  if (c.in.empty()) c.busySince = Clock::now();
  c.in.append(buf, got);
  if (c.in.size() < kFrameHeaderBytes) return true;
  const size_t frameLen = getU32(c.in, 0);
  if (frameLen > frameLimit(c)) {
    refuse(c, "a frame of " + std::to_string(frameLen) + " bytes is over the limit of " +
                  std::to_string(frameLimit(c)) + (c.authenticated ? "" : " before authentication"));
    return false;
  }
  if (c.in.size() < kFrameHeaderBytes + frameLen + kMacBytes) return true;
  return handleFrame(c);
}

bool TcpStoreServer::handleFrame(Connection& c) {
  const size_t len = getU32(c.in, 0);
  std::string payload = c.in.substr(kFrameHeaderBytes, len);
  Digest mac;
  std::memcpy(mac.data(), c.in.data() + kFrameHeaderBytes + len, kMacBytes);
  c.in.clear();
  if (!digestEqual(mac, frameMac(secret_, c.nonce, c.seq++, payload))) {
    refuse(c, "bad or missing job secret (a process outside this job, or a stale TFRING_SECRET)");
    return false;
  }
  c.authenticated = true;
  const uint32_t klen = getU32(payload, 1);
  if (payload.size() < 5 || 5 + size_t{klen} > payload.size()) {
    refuse(c, "malformed request");
    return false;
  }
  const char op = payload[0];
  std::string key = payload.substr(5, klen), rest = payload.substr(5 + klen);
  if (op == 'S') return serveSet(c, key, rest);
  if (op == 'A' && rest.size() == 8) return serveAdd(c, key, rest);
  if (op == 'G' && rest.size() == 4) return serveGet(c, std::move(key), rest);
  refuse(c, "malformed request");
  return false;
}

bool TcpStoreServer::serveSet(Connection& c, const std::string& key, const std::string& value) {
  data_.set(key, value);
  if (!reply(c, "K")) return false;
  answerWaiters(key);
  return true;
}

bool TcpStoreServer::serveAdd(Connection& c, const std::string& key, const std::string& rest) {
  int64_t delta = 0;
  std::memcpy(&delta, rest.data(), 8);
  try {
    std::string sum = std::to_string(data_.add(key, delta));
    if (!reply(c, "K" + sum)) return false;
  } catch (const std::exception&) {
    return reply(c, "E");  // the key holds no integer
  }
  answerWaiters(key);
  return true;
}

// Answers at once when the key exists; else parks the connection for at most one wait slice (the
// client asks again until its own deadline), so one waiting client never holds the loop.
bool TcpStoreServer::serveGet(Connection& c, std::string key, const std::string& rest) {
  std::string value;
  if (data_.tryGet(key, &value)) return reply(c, "K" + value);
  const double waitS = std::min(getU32(rest, 0) / 1000.0, limits_.waitSlice);
  if (waitS <= 0) return reply(c, "N");
  c.waiting = true;
  c.waitKey = std::move(key);
  c.waitUntil = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(waitS));
  return true;
}

bool TcpStoreServer::reply(Connection& c, const std::string& payload) {
  c.waiting = false;
  c.out = encodeFrame(secret_, c.nonce, c.seq++, payload);
  c.outAt = 0;
  c.busySince = Clock::now();
  return flush(c);
}

bool TcpStoreServer::flush(Connection& c) {
  while (c.outAt < c.out.size()) {
    iovec iov{&c.out[c.outAt], c.out.size() - c.outAt};
    size_t k = c.sock.sendSome(&iov, 1);
    if (k == 0) return true;  // the rest when the socket is writable again
    c.outAt += k;
  }
  c.out.clear();
  c.outAt = 0;
  return true;
}

void TcpStoreServer::answerWaiters(const std::string& key) {
  std::string value;
  if (!data_.tryGet(key, &value)) return;
  for (auto& c : conns_) {
    if (c->waiting && !c->dead && c->waitKey == key) {
      try {
        c->dead = !reply(*c, "K" + value);
      } catch (const PeerError&) {
        c->dead = true;
      }
    }
  }
}

void TcpStoreServer::expire() {
  const auto now = Clock::now();
  for (auto& c : conns_) {
    if (c->dead) continue;
    try {
      if (c->waiting && now >= c->waitUntil) {
        c->dead = !reply(*c, "N");
      } else if (!c->authenticated && secondsSince(c->accepted) > limits_.authTimeout) {
        refuse(*c, "did not authenticate within " + std::to_string(static_cast<int>(limits_.authTimeout)) + " s");
        c->dead = true;
      } else if (c->busy() && secondsSince(c->busySince) > limits_.frameTimeout) {
        refuse(*c, "a frame stalled for " + std::to_string(static_cast<int>(limits_.frameTimeout)) + " s");
        c->dead = true;
      }
    } catch (const PeerError&) {
      c->dead = true;
    }
  }
}

void TcpStoreServer::refuse(const Connection& c, const std::string& why) {
  ++refused_;
  if (secondsSince(lastLog_) < 1.0) {
    ++unlogged_;
    return;
  }
  std::string more = unlogged_ ? " (" + std::to_string(unlogged_) + " more refused since the last message)" : "";
  std::fprintf(stderr, "tfring: rendezvous store refused a connection from %s: %s%s\n", c.peer.c_str(),
               why.c_str(), more.c_str());
  lastLog_ = Clock::now();
  unlogged_ = 0;
}

}  // namespace tfring
