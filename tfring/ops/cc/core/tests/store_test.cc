// One contract for every store (HashStore, TcpStore through a server), plus the HMAC refusal.
#include <memory>

#include "../store.h"
#include "../tcp_store.h"
#include "test_framework.h"

using namespace tfring;

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
  TcpStoreServer server("127.0.0.1", 0, "secret");
  TcpStore s("127.0.0.1", server.port(), "secret", Deadline::after(5));
  storeContract(s);
}

TEST(tcp_store_get_waits_for_another_client) {
  TcpStoreServer server("127.0.0.1", 0, "secret");
  tfring_test::spawn(2, [&](int r) {
    TcpStore s("127.0.0.1", server.port(), "secret", Deadline::after(5));
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(700));  // longer than one server wait slice
      s.set("late", "here");
    } else {
      CHECK_EQ(s.get("late", Deadline::after(5)), std::string("here"));
    }
  });
}

TEST(tcp_store_refuses_wrong_secret) {
  TcpStoreServer server("127.0.0.1", 0, "right");
  CHECK_THROWS(TcpStore("127.0.0.1", server.port(), "wrong", Deadline::after(5)), "store");
  for (int i = 0; i < 50 && server.refusedCount() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK_EQ(server.refusedCount(), 1);
  // The right secret still works afterwards.
  TcpStore ok("127.0.0.1", server.port(), "right", Deadline::after(5));
  ok.set("k", "v");
}

TEST(tcp_store_connect_times_out) {
  // Nothing listens on this port: the client gives up at its deadline with a clear message.
  Socket probe = Socket::listen("127.0.0.1", 0);
  int port = probe.port();
  probe.close();
  CHECK_THROWS(TcpStore("127.0.0.1", port, "s", Deadline::after(0.5)), "cannot reach the store");
}
