#include "rendezvous/tcp_store.h"

#include <cstdio>
#include <cstring>

#include "rendezvous/store_frame.h"

namespace tfring {
namespace {

void writeFrame(const Socket& s, const std::string& secret, const std::string& nonce, uint64_t seq,
                const std::string& payload, Deadline d) {
  std::string frame = encodeFrame(secret, nonce, seq, payload);
  s.sendAll(frame.data(), frame.size(), d);
}

// Returns false when the HMAC does not match or the frame is impossibly large.
bool readFrame(const Socket& s, const std::string& secret, const std::string& nonce, uint64_t seq,
               std::string* payload, Deadline d) {
  uint32_t len = 0;
  s.recvAll(&len, 4, d);
  if (len > TcpStoreServerLimits().maxValueFrame + 1) return false;
  payload->assign(len, '\0');
  s.recvAll(&(*payload)[0], len, d);
  Digest mac;
  s.recvAll(mac.data(), mac.size(), d);
  return digestEqual(mac, frameMac(secret, nonce, seq, *payload));
}

// Socket::connect, with a line on stderr every kReportEverySeconds while rank 0's store does not
// answer (under mpirun or srun a rank 0 that died early leaves nothing else to say why the job
// does not start).
Socket connectReporting(const std::string& host, int port, Deadline deadline) {
  const auto start = Clock::now();
  for (;;) {
    Deadline slice = Deadline::after(kReportEverySeconds);
    try {
      return Socket::connect(host, port, slice.time() < deadline.time() ? slice : deadline);
    } catch (const Error&) {
      if (deadline.expired()) throw;
    }
    std::fprintf(stderr, "tfring: still waiting for the rendezvous store of rank 0 at %s:%d (%d s)\n",
                 host.c_str(), port, static_cast<int>(std::chrono::duration<double>(Clock::now() - start).count()));
  }
}

}  // namespace

TcpStore::TcpStore(const std::string& host, int port, std::string secret, double requestTimeout,
                   Deadline connectDeadline)
    : secret_(std::move(secret)), requestTimeout_(requestTimeout), where_(host + ":" + std::to_string(port)) {
  try {
    sock_ = connectReporting(host, port, connectDeadline);
    nonce_.assign(kNonceBytes, '\0');
    sock_.recvAll(&nonce_[0], kNonceBytes, connectDeadline);
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
  call(encodeRequest('S', key, value), Deadline::after(requestTimeout_));
}

std::string TcpStore::get(const std::string& key, Deadline deadline) {
  for (;;) {
    std::string rest;
    // The server parks a get at most this long, well inside our own request deadline: a reply
    // that came after we gave up would be read as the answer to the next request.
    putU32(&rest, static_cast<uint32_t>(deadline.remainingMs(static_cast<int>(requestTimeout_ * 500))));
    std::string reply = call(encodeRequest('G', key, rest), Deadline::after(requestTimeout_));
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
  std::string reply = call(encodeRequest('G', key, rest), Deadline::after(requestTimeout_));
  if (reply.empty() || reply[0] != 'K') return false;
  *value = reply.substr(1);
  return true;
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::string rest(reinterpret_cast<const char*>(&delta), 8);
  std::string reply = call(encodeRequest('A', key, rest), Deadline::after(requestTimeout_));
  if (reply.empty() || reply[0] != 'K') {
    throw Error(Code::kInvalidArgument, "rendezvous store: key '" + key + "' does not hold an integer");
  }
  return std::stoll(reply.substr(1));
}

}  // namespace tfring
