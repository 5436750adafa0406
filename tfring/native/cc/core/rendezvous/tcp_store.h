// The rendezvous store over TCP, client side: every rank (rank 0 too) talks to rank 0's
// TcpStoreServer (tcp_store_server.h) through one TcpStore. Wire format: store_frame.h.
#pragma once

#include <condition_variable>
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
  // asks again until its own deadline), or less where the caller gives a deadline.
  //
  // A request that went out and got no answer in time leaves the connection unusable (its late
  // answer would be read as the next request's), and means rank 0 stopped answering: every later
  // request fails at once, saying so, rather than waiting out another timeout. Requests take turns
  // on the one connection; waiting for one's turn counts against the deadline.
  TcpStore(const std::string& host, int port, std::string secret, double requestTimeout, Deadline connectDeadline);
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Deadline deadline) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool tryGet(const std::string& key, std::string* value) override;
  void set(const std::string& key, const std::string& value, Deadline deadline) override;
  bool tryGet(const std::string& key, std::string* value, Deadline deadline) override;

 private:
  std::string call(const std::string& request, Deadline deadline);
  // `deadline`, or the request timeout from now when that comes first.
  Deadline requestDeadline(Deadline deadline) const;

  std::mutex mu_;                // guards busy_ and unanswered_
  std::condition_variable turn_;  // a request ended: the next may use the connection
  bool busy_ = false;             // a request is on the connection
  std::string unanswered_;        // why this connection is no longer used ("" while it is)
  std::string secret_;
  double requestTimeout_;
  Socket sock_;
  std::string nonce_;
  uint64_t sendSeq_ = 0;
  uint64_t recvSeq_ = 0;
  std::string where_;
};

}  // namespace tfring
