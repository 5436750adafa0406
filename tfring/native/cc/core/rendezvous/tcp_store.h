// The rendezvous store over TCP, client side: every rank (rank 0 too) talks to rank 0's
// TcpStoreServer (tcp_store_server.h) through one TcpStore. Wire format: store_frame.h.
#pragma once

#include <mutex>
#include <string>

#include "rendezvous/store.h"
#include "rendezvous/tcp_store_server.h"
#include "transport/socket.h"

namespace tfring {

class TcpStore : public Store {
 public:
  // Connects (retrying until `connectDeadline`: the server may not be up yet) and checks that the
  // server knows the secret. Each request then gets `requestTimeout` seconds to be answered (a get
  // asks again until its own deadline).
  TcpStore(const std::string& host, int port, std::string secret, double requestTimeout, Deadline connectDeadline);
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Deadline deadline) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool tryGet(const std::string& key, std::string* value) override;

 private:
  std::string call(const std::string& request, Deadline deadline);

  std::mutex mu_;
  std::string secret_;
  double requestTimeout_;
  Socket sock_;
  std::string nonce_;
  uint64_t sendSeq_ = 0;
  uint64_t recvSeq_ = 0;
  std::string where_;
};

}  // namespace tfring
