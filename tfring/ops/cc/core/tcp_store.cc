#include "tcp_store.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>

#include <cstring>
#include <iostream>
#include <random>

#include "hmac.h"

namespace tfring {
namespace {

constexpr uint32_t kMaxFrame = 64u << 20;
constexpr int kServerWaitSliceMs = 500;

std::string randomNonce() {
  std::random_device rd;
  std::string n(16, '\0');
  for (auto& c : n) c = static_cast<char>(rd());
  return n;
}

Digest frameMac(const std::string& secret, const std::string& nonce, uint64_t seq,
                const std::string& payload) {
  std::string msg = nonce;
  msg.append(reinterpret_cast<const char*>(&seq), sizeof(seq));
  msg += payload;
  return hmacSha256(secret, msg.data(), msg.size());
}

void writeFrame(const Socket& s, const std::string& secret, const std::string& nonce, uint64_t seq,
                const std::string& payload, Deadline d) {
  uint32_t len = static_cast<uint32_t>(payload.size());
  Digest mac = frameMac(secret, nonce, seq, payload);
  std::string frame(reinterpret_cast<const char*>(&len), 4);
  frame += payload;
  frame.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  s.sendAll(frame.data(), frame.size(), d);
}

// Returns false when the HMAC does not match.
bool readFrame(const Socket& s, const std::string& secret, const std::string& nonce, uint64_t seq,
               std::string* payload, Deadline d) {
  uint32_t len = 0;
  s.recvAll(&len, 4, d);
  if (len > kMaxFrame) return false;
  payload->assign(len, '\0');
  s.recvAll(&(*payload)[0], len, d);
  Digest mac;
  s.recvAll(mac.data(), mac.size(), d);
  return digestEqual(mac, frameMac(secret, nonce, seq, *payload));
}

void putU32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
uint32_t getU32(const std::string& s, size_t at) {
  uint32_t v = 0;
  if (at + 4 <= s.size()) std::memcpy(&v, s.data() + at, 4);
  return v;
}

std::string request(char op, const std::string& key, const std::string& rest) {
  std::string r(1, op);
  putU32(&r, static_cast<uint32_t>(key.size()));
  r += key;
  r += rest;
  return r;
}

}  // namespace

TcpStoreServer::TcpStoreServer(const std::string& host, int port, std::string secret)
    : secret_(std::move(secret)), listener_(Socket::listen(host, port)), port_(listener_.port()) {
  acceptThread_ = std::thread([this] { acceptLoop(); });
}

TcpStoreServer::~TcpStoreServer() {
  stop_ = true;
  if (acceptThread_.joinable()) acceptThread_.join();
  std::list<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(threadsMu_);
    for (int fd : liveFds_) ::shutdown(fd, SHUT_RDWR);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

void TcpStoreServer::acceptLoop() {
  while (!stop_) {
    try {
      Socket s = listener_.accept(Deadline::after(0.2));
      std::lock_guard<std::mutex> lock(threadsMu_);
      if (stop_) break;
      liveFds_.push_back(s.fd());
      threads_.emplace_back([this, sock = std::move(s)]() mutable { serve(std::move(sock)); });
    } catch (const Error&) {
      // deadline slice passed; look at stop_ again
    }
  }
}

void TcpStoreServer::serve(Socket sock) {
  const int fd = sock.fd();
  try {
    std::string nonce = randomNonce();
    sock.sendAll(nonce.data(), nonce.size(), Deadline::after(10));
    uint64_t seq = 0;
    while (!stop_) {
      pollfd p{sock.fd(), POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      std::string req;
      if (!readFrame(sock, secret_, nonce, seq++, &req, Deadline::after(30))) {
        ++refused_;
        std::cerr << "tfring: rendezvous store refused a connection: bad or missing job secret "
                     "(a process outside this job, or a stale TFRING_SECRET)"
                  << std::endl;
        break;
      }
      if (req.size() < 5) break;
      char op = req[0];
      uint32_t klen = getU32(req, 1);
      if (5 + klen > req.size()) break;
      std::string key = req.substr(5, klen);
      std::string rest = req.substr(5 + klen);
      std::string reply;
      if (op == 'S') {
        data_.set(key, rest);
        reply = "K";
      } else if (op == 'G') {
        uint32_t waitMs = std::min<uint32_t>(getU32(rest, 0), kServerWaitSliceMs);
        try {
          reply = "K" + data_.get(key, Deadline::after(waitMs / 1000.0));
        } catch (const Error&) {
          reply = "N";
        }
      } else if (op == 'A') {
        int64_t delta = 0;
        if (rest.size() == 8) std::memcpy(&delta, rest.data(), 8);
        reply = "K" + std::to_string(data_.add(key, delta));
      } else {
        break;
      }
      writeFrame(sock, secret_, nonce, seq++, reply, Deadline::after(30));
    }
  } catch (const Error&) {
    // The client went away; its rank reports that, not the store.
  }
  std::lock_guard<std::mutex> lock(threadsMu_);
  liveFds_.remove(fd);
}

TcpStore::TcpStore(const std::string& host, int port, std::string secret, Deadline connectDeadline)
    : secret_(std::move(secret)), where_(host + ":" + std::to_string(port)) {
  try {
    sock_ = Socket::connect(host, port, connectDeadline);
    nonce_.assign(16, '\0');
    sock_.recvAll(&nonce_[0], 16, connectDeadline);
  } catch (const Error& e) {
    throw Error(Code::kDeadlineExceeded,
                "rendezvous: cannot reach the store of rank 0 at " + where_ + ": " + e.what());
  }
  // A round trip proves both sides hold the same secret.
  add("__hello__", 1);
}

std::string TcpStore::call(const std::string& req, Deadline deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    writeFrame(sock_, secret_, nonce_, sendSeq_++, req, deadline);
    std::string reply;
    if (!readFrame(sock_, secret_, nonce_, sendSeq_++, &reply, deadline)) {
      throw Error(Code::kFailedPrecondition,
                  "rendezvous store at " + where_ + " answered with a bad HMAC: the job secret differs");
    }
    return reply;
  } catch (const PeerError& e) {
    throw Error(Code::kUnavailable,
                "rendezvous store at " + where_ +
                    " closed the connection (rank 0 exited, or it refused our job secret): " + e.what());
  }
}

void TcpStore::set(const std::string& key, const std::string& value) {
  call(request('S', key, value), Deadline::after(60));
}

std::string TcpStore::get(const std::string& key, Deadline deadline) {
  for (;;) {
    std::string rest;
    putU32(&rest, static_cast<uint32_t>(deadline.remainingMs()));
    std::string reply = call(request('G', key, rest), Deadline::after(60));
    if (!reply.empty() && reply[0] == 'K') return reply.substr(1);
    if (deadline.expired()) {
      throw Error(Code::kDeadlineExceeded,
                  "rendezvous: key '" + key + "' did not appear in the store before the deadline");
    }
  }
}

bool TcpStore::tryGet(const std::string& key, std::string* value) {
  std::string rest;
  putU32(&rest, 0);
  std::string reply = call(request('G', key, rest), Deadline::after(60));
  if (reply.empty() || reply[0] != 'K') return false;
  *value = reply.substr(1);
  return true;
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::string rest(reinterpret_cast<const char*>(&delta), 8);
  std::string reply = call(request('A', key, rest), Deadline::after(60));
  return std::stoll(reply.substr(1));
}

}  // namespace tfring
