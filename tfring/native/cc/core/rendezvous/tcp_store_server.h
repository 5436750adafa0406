// Rank 0's side of the rendezvous store: one thread, one poll loop over every connection.
//
// Nothing per connection outlives it, and nothing a stranger sends costs more than a little
// memory for a few seconds: a connection must prove the job secret (an HMAC over the server's
// nonce, store_frame.h) with a small first frame within `authTimeout`; until then its frames may
// not exceed `maxUnauthenticatedFrame` bytes, and beyond `maxUnauthenticated` such connections
// the oldest is dropped. Frames are read as their bytes arrive (a length prefix allocates
// nothing), capped per request type, and must complete within `frameTimeout`. Every refusal is
// logged to stderr with the peer's address (at most one line a second; the rest are counted).
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "rendezvous/store.h"
#include "transport/socket.h"

namespace tfring {

struct TcpStoreServerLimits {
  // From the configuration (store_auth_timeout, store_frame_timeout): no defaults here.
  double authTimeout = 0;              // seconds to send a first frame with the right HMAC
  double frameTimeout = 0;             // seconds to finish a frame, or to take a reply, once begun
  size_t maxUnauthenticated = 128;     // connections that have not authenticated yet
  size_t maxUnauthenticatedFrame = 1024;
  size_t maxKeyFrame = 64 << 10;       // get and add requests
  size_t maxValueFrame = 64 << 20;     // set requests
  double waitSlice = 0.5;              // longest a get waits for its key before answering "not yet"
};

class TcpStoreServer {
 public:
  using Limits = TcpStoreServerLimits;

  // Listens on host:port (port 0 picks a free one; see port()).
  TcpStoreServer(const std::string& host, int port, std::string secret, Limits limits);
  ~TcpStoreServer();
  int port() const { return port_; }
  // How many connections were refused or dropped (bad HMAC, oversized or malformed frame,
  // too slow, too many): tests read it.
  int refusedCount() const { return refused_.load(); }

 private:
  struct Connection;

  void loop();
  void acceptAll();
  void poll(int timeoutMs);
  bool readFrom(Connection& c);
  bool handleFrame(Connection& c);
  bool serveSet(Connection& c, const std::string& key, const std::string& value);
  bool serveAdd(Connection& c, const std::string& key, const std::string& rest);
  bool serveGet(Connection& c, std::string key, const std::string& rest);
  bool reply(Connection& c, const std::string& payload);
  bool flush(Connection& c);
  void answerWaiters(const std::string& key);
  void expire();
  size_t frameLimit(const Connection& c) const;
  void refuse(const Connection& c, const std::string& why);

  std::string secret_;
  Limits limits_;
  Socket listener_;
  int port_;
  std::atomic<bool> stop_{false};
  std::atomic<int> refused_{0};
  HashStore data_;
  std::list<std::unique_ptr<Connection>> conns_;  // oldest first
  Clock::time_point acceptPausedUntil_{};
  Clock::time_point lastLog_{};
  int unlogged_ = 0;
  std::thread thread_;
};

}  // namespace tfring
