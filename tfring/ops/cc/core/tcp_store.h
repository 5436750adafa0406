// The rendezvous store over TCP: rank 0 runs a TcpStoreServer, every rank (rank 0 too) talks to
// it through a TcpStore client.
//
// Wire format, both directions: u32 length, payload, HMAC-SHA256(secret, nonce | seq | payload).
// The server opens each connection by sending a random 16-byte nonce; `seq` counts messages on
// that connection, so a recorded message cannot be replayed. A message with a wrong HMAC (a peer
// without the job secret) is refused: the server logs it to stderr and closes the connection.
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "socket.h"
#include "store.h"

namespace tfring {

class TcpStoreServer {
 public:
  // Listens on host:port (port 0 picks a free one; see port()).
  TcpStoreServer(const std::string& host, int port, std::string secret);
  ~TcpStoreServer();
  int port() const { return port_; }
  // How many connections were refused for a bad HMAC (tests read it).
  int refusedCount() const { return refused_.load(); }

 private:
  void acceptLoop();
  void serve(Socket sock);

  std::string secret_;
  Socket listener_;
  int port_;
  std::atomic<bool> stop_{false};
  std::atomic<int> refused_{0};
  HashStore data_;
  std::mutex threadsMu_;
  std::list<std::thread> threads_;
  std::list<int> liveFds_;
  std::thread acceptThread_;
};

class TcpStore : public Store {
 public:
  // Connects (retrying until `connectDeadline`: the server may not be up yet) and checks that the
  // server knows the secret.
  TcpStore(const std::string& host, int port, std::string secret, Deadline connectDeadline);
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Deadline deadline) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool tryGet(const std::string& key, std::string* value) override;

 private:
  std::string call(const std::string& request, Deadline deadline);

  std::mutex mu_;
  std::string secret_;
  Socket sock_;
  std::string nonce_;
  uint64_t sendSeq_ = 0;
  uint64_t recvSeq_ = 0;
  std::string where_;
};

}  // namespace tfring
