// One contract for every store (HashStore, TcpStore through a server), plus the HMAC refusal.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "rendezvous/store.h"
#include "rendezvous/store_frame.h"
#include "rendezvous/tcp_store.h"
#include "tests/test_config.h"
#include "tests/test_framework.h"

using namespace tfring;
using tfring_test::kStoreRequestTimeout;
using tfring_test::storeLimits;

namespace {

void storeContract(Store& s) {
  s.set("a", "1");
  CHECK_EQ(s.get("a", Deadline::after(1)), std::string("1"));
  std::string v;
  CHECK(!s.tryGet("missing", &v));
  CHECK(s.tryGet("a", &v));
  CHECK_EQ(v, std::string("1"));
  CHECK_EQ(s.add("n", 2), 2);
  CHECK_EQ(s.add("n", 3), 5);
  std::string big(1 << 20, 'x');
  s.set("big", big);
  CHECK_EQ(s.get("big", Deadline::after(5)).size(), big.size());
  CHECK_THROWS(s.get("never", Deadline::after(0.2)), "never");
}

}  // namespace

TEST(hash_store_contract) {
  HashStore s;
  storeContract(s);
}

TEST(prefix_store_contract) {
  auto base = std::make_shared<HashStore>();
  PrefixStore s("job", base);
  storeContract(s);
  std::string v;
  CHECK(base->tryGet("job/a", &v));
}

TEST(tcp_store_contract) {
  TcpStoreServer server("127.0.0.1", 0, "secret", storeLimits());
  TcpStore s("127.0.0.1", server.port(), "secret", kStoreRequestTimeout, Deadline::after(5));
  storeContract(s);
}

TEST(tcp_store_get_waits_for_another_client) {
  TcpStoreServer server("127.0.0.1", 0, "secret", storeLimits());
  tfring_test::spawn(2, [&](int r) {
    TcpStore s("127.0.0.1", server.port(), "secret", kStoreRequestTimeout, Deadline::after(5));
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(700));  // longer than one server wait slice
      s.set("late", "here");
    } else {
      CHECK_EQ(s.get("late", Deadline::after(5)), std::string("here"));
    }
  });
}

TEST(tcp_store_refuses_wrong_secret) {
  TcpStoreServer server("127.0.0.1", 0, "right", storeLimits());
  CHECK_THROWS(TcpStore("127.0.0.1", server.port(), "wrong", kStoreRequestTimeout, Deadline::after(5)), "store");
  for (int i = 0; i < 50 && server.refusedCount() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK_EQ(server.refusedCount(), 1);
  // The right secret still works afterwards.
  TcpStore ok("127.0.0.1", server.port(), "right", kStoreRequestTimeout, Deadline::after(5));
  ok.set("k", "v");
}

TEST(tcp_store_connect_times_out) {
  // Nothing listens on this port: the client gives up at its deadline with a clear message.
  Socket probe = Socket::listen("127.0.0.1", 0);
  int port = probe.port();
  probe.close();
  CHECK_THROWS(TcpStore("127.0.0.1", port, "s", kStoreRequestTimeout, Deadline::after(0.5)), "cannot reach the store");
}

TEST(tcp_store_request_gives_up_after_the_configured_timeout) {
  // A "server" that greets with a nonce and then never answers: each request waits
  // store_request_timeout seconds (here 0.3), not a built-in minute.
  Socket listener = Socket::listen("127.0.0.1", 0);
  std::thread silent([&] {
    Socket s = listener.accept(Deadline::after(5));
    std::string nonce(kNonceBytes, 'n');
    s.sendAll(nonce.data(), nonce.size(), Deadline::after(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  });
  const auto start = Clock::now();
  CHECK_THROWS(TcpStore("127.0.0.1", listener.port(), "s", 0.3, Deadline::after(5)), "timed out");
  CHECK(std::chrono::duration<double>(Clock::now() - start).count() < 1.2);
  silent.join();
}

// A store that answered once and then stops answering (rank 0 stopped): the request that timed
// out leaves the connection unusable (its late reply would answer the next request), so every
// later request fails at once, saying the store stopped answering, instead of waiting again.
TEST(tcp_store_stops_asking_a_store_that_stopped_answering) {
  Socket listener = Socket::listen("127.0.0.1", 0);
  std::atomic<bool> done{false};
  std::thread frozen([&] {
    Socket s = listener.accept(Deadline::after(5));
    std::string nonce(kNonceBytes, 'n');
    s.sendAll(nonce.data(), nonce.size(), Deadline::after(5));
    uint32_t len = 0;
    s.recvAll(&len, 4, Deadline::after(5));  // the hello: answered
    std::string rest(len + kMacBytes, '\0');
    s.recvAll(&rest[0], rest.size(), Deadline::after(5));
    std::string hello = encodeFrame("s", nonce, 1, "K1");
    s.sendAll(hello.data(), hello.size(), Deadline::after(5));
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // then nothing
  });
  struct Joined {
    std::atomic<bool>& done;
    std::thread& t;
    ~Joined() {
      done = true;
      t.join();
    }
  } joined{done, frozen};
  TcpStore store("127.0.0.1", listener.port(), "s", 1.0, Deadline::after(5));
  auto start = Clock::now();
  CHECK_THROWS(store.set("a", "1"), "timed out");
  CHECK(std::chrono::duration<double>(Clock::now() - start).count() >= 0.9);
  start = Clock::now();
  std::string v;
  CHECK_THROWS(store.tryGet("a", &v), "stopped answering");
  CHECK(std::chrono::duration<double>(Clock::now() - start).count() < 0.5);
}

// ---- Hostile clients (issue 11): churn, idle and oversized connections must not hurt the server.
namespace {

// Virtual memory of this process in MiB (an unjoined thread keeps its 8 MiB stack mapped).
double vmMiB() {
  std::ifstream f("/proc/self/statm");
  double pages = 0;
  f >> pages;
  return pages * sysconf(_SC_PAGESIZE) / (1 << 20);
}

// True when the server closed `s` within `seconds` (reads and drops anything it sent first).
bool closedWithin(const Socket& s, double seconds) {
  Deadline d = Deadline::after(seconds);
  char buf[64];
  while (!d.expired()) {
    try {
      if (s.recvSome(buf, sizeof(buf)) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } catch (const PeerError&) {
      return true;
    }
  }
  return false;
}

}  // namespace

TEST(tcp_store_survives_connection_churn) {
  TcpStoreServer server("127.0.0.1", 0, "secret", storeLimits());
  TcpStore client("127.0.0.1", server.port(), "secret", kStoreRequestTimeout, Deadline::after(5));
  const double before = vmMiB();
  for (int i = 0; i < 3000; ++i) {
    Socket s = Socket::connect("127.0.0.1", server.port(), Deadline::after(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(vmMiB() - before < 64);  // nothing per connection outlives it
  client.set("still", "alive");
  CHECK_EQ(client.get("still", Deadline::after(5)), std::string("alive"));
}

TEST(tcp_store_refuses_a_huge_frame_before_reading_it) {
  TcpStoreServer server("127.0.0.1", 0, "secret", storeLimits());
  for (uint32_t len : {uint32_t{60} << 20, uint32_t{1} << 30, ~uint32_t{0}}) {
    Socket s = Socket::connect("127.0.0.1", server.port(), Deadline::after(5));
    s.sendAll(&len, 4, Deadline::after(5));
    CHECK(closedWithin(s, 2.0));  // not held open waiting for a payload it will never accept
  }
  TcpStore ok("127.0.0.1", server.port(), "secret", kStoreRequestTimeout, Deadline::after(5));
  ok.set("k", "v");
}

TEST(tcp_store_bounds_idle_unauthenticated_connections) {
  TcpStoreServer::Limits limits = storeLimits();
  limits.authTimeout = 0.5;
  limits.maxUnauthenticated = 16;
  TcpStoreServer server("127.0.0.1", 0, "secret", limits);
  std::vector<Socket> idle;
  for (int i = 0; i < 40; ++i) idle.push_back(Socket::connect("127.0.0.1", server.port(), Deadline::after(5)));
  // The oldest are dropped first, at once; the rest when the authentication deadline passes.
  CHECK(closedWithin(idle.front(), 0.4));
  CHECK(closedWithin(idle.back(), 3.0));
  // A half-sent frame on an authenticated-looking connection times out too; the store serves on.
  TcpStore ok("127.0.0.1", server.port(), "secret", kStoreRequestTimeout, Deadline::after(5));
  ok.set("k", "v");
  CHECK_EQ(ok.get("k", Deadline::after(2)), std::string("v"));
}

TEST(tcp_store_survives_random_bytes) {
  TcpStoreServer server("127.0.0.1", 0, "secret", storeLimits());
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    Socket s = Socket::connect("127.0.0.1", server.port(), Deadline::after(5));
    std::string junk(rng() % 200, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    if (i % 3 == 0 && junk.size() >= 4) junk[3] = 0;  // small lengths: frames that get MAC-checked
    try {
      s.sendAll(junk.data(), junk.size(), Deadline::after(1));
    } catch (const Error&) {
    }
  }
  // The server refuses on its own thread: give it time to reach the junk (it failed at once on a
  // loaded machine before the server had read any).
  const Deadline refused = Deadline::after(5);
  while (server.refusedCount() == 0 && !refused.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(server.refusedCount() > 0);
  TcpStore ok("127.0.0.1", server.port(), "secret", kStoreRequestTimeout, Deadline::after(5));
  CHECK_EQ(ok.add("n", 1), 1);
}

// Under Kubernetes rank 0's DNS name appears only once its pod runs: a name that does not resolve is
// retried until the deadline, and the error then says it could not be resolved.
TEST(connect_retries_a_name_that_does_not_resolve_until_the_deadline) {
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS(Socket::connect("no-such-host.invalid", 29500, Deadline::after(0.6)),
               "cannot resolve host 'no-such-host.invalid'");
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(waited >= 0.5);
}
