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

Deadline TcpStore::requestDeadline(Deadline deadline) const {
  const Deadline own = Deadline::after(requestTimeout_);
  return deadline.time() < own.time() ? deadline : own;
}

std::string TcpStore::call(const std::string& req, Deadline deadline) {
  // Our turn on the connection, waited for no longer than the deadline (a condition variable
  // rather than a timed mutex, whose timed lock ThreadSanitizer does not follow).
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!turn_.wait_until(lock, deadline.time(), [this] { return !busy_; })) {
      throw Error(Code::kDeadlineExceeded, "rendezvous store at " + where_ +
                                               ": another request of this rank still waits for its answer");
    }
    if (!unanswered_.empty()) throw Error(Code::kDeadlineExceeded, unanswered_);
    if (deadline.expired()) {  // nothing sent: the connection stays usable
      throw Error(Code::kDeadlineExceeded, "rendezvous store at " + where_ + ": no time left for a request");
    }
    busy_ = true;
  }
  struct Turn {
    TcpStore* store;
    ~Turn() {
      {
        std::lock_guard<std::mutex> lock(store->mu_);
        store->busy_ = false;
      }
      store->turn_.notify_one();
    }
  } turn{this};
  const auto start = Clock::now();
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
  } catch (const Error& e) {
    if (e.code() != Code::kDeadlineExceeded) throw;
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.0f", std::chrono::duration<double>(Clock::now() - start).count());
    const std::string why = "the rendezvous store of rank 0 at " + where_ + " stopped answering (no answer in " +
                            seconds + " s: rank 0 may be stopped, swapped out or hung); this rank asks it nothing more";
    {
      std::lock_guard<std::mutex> lock(mu_);
      unanswered_ = why;
    }
    throw Error(Code::kDeadlineExceeded, why + " (" + e.what() + ")");
  }
}

void TcpStore::set(const std::string& key, const std::string& value) {
  call(encodeRequest('S', key, value), Deadline::after(requestTimeout_));
}

void TcpStore::set(const std::string& key, const std::string& value, Deadline deadline) {
  call(encodeRequest('S', key, value), requestDeadline(deadline));
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
  return tryGet(key, value, Deadline::after(requestTimeout_));
}

bool TcpStore::tryGet(const std::string& key, std::string* value, Deadline deadline) {
  std::string rest;
  putU32(&rest, 0);
  std::string reply = call(encodeRequest('G', key, rest), requestDeadline(deadline));
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
