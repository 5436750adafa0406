// Joining the ring (bootstrap.h, ring_links.h): settings every rank must share, and strangers on
// the data ports during rendezvous.
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "algorithms/allreduce_ring.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/rank_gather.h"
#include "rendezvous/hmac.h"
#include "rendezvous/store.h"
#include "tests/ring_helpers.h"
#include "tests/test_framework.h"
#include "transport/socket.h"

using namespace tfring;
using namespace tfring_test;

namespace {

// Every rank's connectRing error (empty when it succeeded).
std::vector<std::string> joinWith(const std::function<void(int, Config&)>& tweak, int size = 2) {
  auto store = std::make_shared<HashStore>();
  std::string job = uniqueJob();
  std::vector<std::string> errors(size);
  tfring_test::spawn(size, [&](int r) {
    Config c = rankConfig(r, size, allModes()[0], job);
    c.rendezvousTimeout = 10;
    tweak(r, c);
    PrefixStore ps(job, store);
    try {
      auto t = connectRing(c, ps);
    } catch (const Error& e) {
      errors[r] = e.what();
    }
  });
  return errors;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(rendezvous_refuses_different_fusion_thresholds) {
  auto errors = joinWith([](int r, Config& c) { c.fusionThresholdBytes = r == 0 ? 0 : size_t{64} << 20; });
  for (const auto& e : errors) {
    CHECK(contains(e, "rank 1 runs with fusion_threshold_bytes=67108864 but rank 0 with fusion_threshold_bytes=0"));
  }
}

TEST(rendezvous_refuses_different_transports_and_copy_modes) {
  auto errors = joinWith([](int r, Config& c) { c.transport = r == 2 ? "shm" : "tcp"; }, 3);
  for (const auto& e : errors) CHECK(contains(e, "rank 2 runs with transport=shm but rank 0 with transport=tcp"));
  errors = joinWith([](int r, Config& c) { c.singleCopy = r == 0; });
  for (const auto& e : errors) CHECK(contains(e, "single_copy=0 but rank 0 with single_copy=1"));
}

TEST(rendezvous_is_not_delayed_by_strangers_on_the_data_port) {
  auto store = std::make_shared<HashStore>();
  std::string job = uniqueJob();
  std::vector<Socket> strangers;
  const auto start = Clock::now();
  tfring_test::spawn(3, [&](int r) {
    if (r == 2) {  // the stranger: waits for rank 1's data port, then occupies it
      std::string addr = store->get(job + "/addr/1", Deadline::after(10));
      std::istringstream in(addr);
      std::string host;
      int port = 0;
      in >> host >> port;
      for (int i = 0; i < 13; ++i) strangers.push_back(Socket::connect(host, port, Deadline::after(5)));
      // A well-formed answer claiming to be rank 0, MAC'd with the secret for another nonce (a replay).
      Socket replay = Socket::connect(host, port, Deadline::after(5));
      std::string msg = "tfring-data|" + job + "|0->1|" + std::string(16, 'x');
      Digest mac = hmacSha256("test-secret", msg.data(), msg.size());
      uint32_t who = 0;
      replay.sendAll(&who, 4, Deadline::after(5));
      replay.sendAll(mac.data(), mac.size(), Deadline::after(5));
      strangers.push_back(std::move(replay));
      return;
    }
    Config c = rankConfig(r, 2, allModes()[0], job);
    c.rendezvousTimeout = 20;
    PrefixStore ps(job, store);
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 1 listens first
    auto t = connectRing(c, ps);
    std::vector<float> x(5, 1.0f + r), y(5);
    ringAllreduce(t.get(), 2, {{x.data(), x.size() * 4}}, {{y.data(), y.size() * 4}}, DataType::kFloat32,
                  ReduceOp::kSum, Deadline::after(10));
    CHECK_EQ(y[4], 3.0f);
    storeBarrier(ps, "end", r, 2, Deadline::after(10));
  });
  CHECK(std::chrono::duration<double>(Clock::now() - start).count() < 5.0);
  CHECK_EQ(strangers.size(), size_t{14});
}

namespace {

// The store as the other ranks see it when rank 0's process (which serves it) exits the moment its
// rendezvous returns: every later request fails as a closed connection does. The other ranks'
// requests are slowed so that any of them still inside the rendezvous is caught there.
class StoreOfRankZero : public Store {
 public:
  using Store::set;  // the deadline overloads call these
  using Store::tryGet;
  StoreOfRankZero(std::shared_ptr<Store> inner, std::shared_ptr<std::atomic<bool>> gone, int rank)
      : inner_(std::move(inner)), gone_(std::move(gone)), rank_(rank) {}
  void set(const std::string& key, const std::string& value) override { reach()->set(key, value); }
  std::string get(const std::string& key, Deadline deadline) override { return reach()->get(key, deadline); }
  int64_t add(const std::string& key, int64_t delta) override { return reach()->add(key, delta); }
  bool tryGet(const std::string& key, std::string* value) override { return reach()->tryGet(key, value); }

 private:
  Store* reach() {
    if (rank_ != 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (*gone_) throw PeerError(0, "rendezvous store closed the connection (rank 0 exited)");
    return inner_.get();
  }
  std::shared_ptr<Store> inner_;
  std::shared_ptr<std::atomic<bool>> gone_;
  int rank_;
};

}  // namespace

TEST(rank_zero_may_exit_as_soon_as_its_rendezvous_returns) {
  for (const char* algorithm : {"ring", "hierarchical"}) {
    auto shared = std::make_shared<HashStore>();
    auto gone = std::make_shared<std::atomic<bool>>(false);
    std::string job = uniqueJob();
    std::vector<std::string> errors(4);
    tfring_test::spawn(4, [&](int r) {
      Config c = rankConfig(r, 4, allModes()[3], job);
      c.allreduceAlgorithm = algorithm;
      c.rendezvousTimeout = 20;
      PrefixStore ps(job, std::make_shared<StoreOfRankZero>(shared, gone, r));
      try {
        Rings rings = connectRings(c, ps);
        if (r == 0) *gone = true;
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
    for (int r = 0; r < 4; ++r) CHECK_EQ(algorithm + (": rank " + std::to_string(r) + ": ") + errors[r],
                                         algorithm + (": rank " + std::to_string(r) + ": "));
  }
}

TEST(every_rank_names_a_setting_that_differs_though_rank_zero_exits_at_once) {
  // Rank 0's process serves the store and exits the moment its init throws: the others must have
  // read every rank's settings by then, and report the mismatch as rank 0 does.
  auto shared = std::make_shared<HashStore>();
  auto gone = std::make_shared<std::atomic<bool>>(false);
  std::string job = uniqueJob();
  std::vector<std::string> errors(3);
  const auto start = Clock::now();
  tfring_test::spawn(3, [&](int r) {
    Config c = rankConfig(r, 3, allModes()[0], job);
    c.rendezvousTimeout = 20;
    c.fusionThresholdBytes = r == 1 ? 4096 : size_t{64} << 20;
    PrefixStore ps(job, std::make_shared<StoreOfRankZero>(shared, gone, r));
    try {
      connectRing(c, ps);
    } catch (const Error& e) {
      errors[r] = e.what();
      if (r == 0) *gone = true;
    }
  });
  for (int r = 0; r < 3; ++r) {
    CHECK_EQ("rank " + std::to_string(r) + ": " + errors[r].substr(0, errors[r].find(": every rank")),
             "rank " + std::to_string(r) +
                 ": rendezvous: rank 1 runs with fusion_threshold_bytes=4096 but rank 0 with "
                 "fusion_threshold_bytes=67108864");
  }
  CHECK(std::chrono::duration<double>(Clock::now() - start).count() < 5.0);  // no one waited out a grace
}

namespace {

// A store through which a rank "dies" (throws what the core does not catch) just before its first
// request for a key containing `fatal`.
class StoreThatDiesAt : public Store {
 public:
  using Store::set;  // the deadline overloads call these
  using Store::tryGet;
  StoreThatDiesAt(std::shared_ptr<Store> inner, std::string fatal)
      : inner_(std::move(inner)), fatal_(std::move(fatal)) {}
  void set(const std::string& key, const std::string& value) override { reach(key)->set(key, value); }
  std::string get(const std::string& key, Deadline deadline) override { return reach(key)->get(key, deadline); }
  int64_t add(const std::string& key, int64_t delta) override { return reach(key)->add(key, delta); }
  bool tryGet(const std::string& key, std::string* value) override { return reach(key)->tryGet(key, value); }

 private:
  Store* reach(const std::string& key) {
    if (key.find(fatal_) != std::string::npos) throw std::runtime_error("this rank died at " + key);
    return inner_.get();
  }
  std::shared_ptr<Store> inner_;
  std::string fatal_;
};

}  // namespace

TEST(rank_zero_reports_a_setting_that_differs_though_a_rank_died_after_reading_them) {
  // Rank 0 waits for the others to have read the settings only so long: then it reports anyway.
  auto shared = std::make_shared<HashStore>();
  std::string job = uniqueJob();
  std::vector<std::string> errors(2);
  const auto start = Clock::now();
  tfring_test::spawn(2, [&](int r) {
    Config c = rankConfig(r, 2, allModes()[0], job);
    c.rendezvousTimeout = 3;
    c.fusionThresholdBytes = r == 1 ? 0 : 4096;
    std::shared_ptr<Store> store = shared;
    if (r == 1) store = std::make_shared<StoreThatDiesAt>(shared, "settings-read");
    PrefixStore ps(job, store);
    try {
      connectRing(c, ps);
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  });
  CHECK(contains(errors[0], "rank 1 runs with fusion_threshold_bytes=0 but rank 0 with fusion_threshold_bytes=4096"));
  CHECK(contains(errors[1], "this rank died at"));
  CHECK(std::chrono::duration<double>(Clock::now() - start).count() < 8.0);
}
