// The engine: fusion, validation across ranks, staged (device) tensors, and the failure paths
// (dead or stalled peer).
#include <cstdio>

#include "engine/engine.h"
#include "tests/ring_helpers.h"

using namespace tfring;
using namespace tfring_test;

TEST(engine_fuses_thousand_small_tensors_at_every_threshold) {
  for (size_t threshold : {size_t{0}, size_t{4096}, size_t{64} << 20}) {
    withEngines(2, allModes()[1], [&](Config& c) { c.fusionThresholdBytes = threshold; },
                [&](int rank, Engine& e) {
                  std::vector<std::vector<float>> ts(1000, std::vector<float>(256));
                  for (size_t k = 0; k < ts.size(); ++k) {
                    for (size_t i = 0; i < 256; ++i) ts[k][i] = static_cast<float>(rank + k + i);
                  }
                  Status s = call(e, allreduceOf(ts, ReduceOp::kMean));
                  CHECK(s.ok());
                  for (size_t k = 0; k < ts.size(); ++k) {
                    for (size_t i = 0; i < 256; i += 51) CHECK_EQ(ts[k][i], static_cast<float>(k + i) + 0.5f);
                  }
                });
  }
}

TEST(engine_mixes_packed_and_in_place_tensors) {
  withEngines(3, allModes()[0], [](Config&) {}, [&](int rank, Engine& e) {
    // Sizes around the packing cut-off (256 KiB) and a zero-size tensor.
    std::vector<std::vector<float>> ts = {std::vector<float>(10), std::vector<float>(300000),
                                          std::vector<float>(0), std::vector<float>(65535),
                                          std::vector<float>(65536), std::vector<float>(3)};
    for (auto& t : ts) std::fill(t.begin(), t.end(), static_cast<float>(rank + 1));
    CHECK(call(e, allreduceOf(ts)).ok());
    for (auto& t : ts) {
      for (float v : t) CHECK_EQ(v, 6.0f);
    }
  });
}

TEST(engine_mismatched_shapes_fail_every_rank_then_recover) {
  for (const Mode& m : allModes()) {
    withEngines(2, m, [](Config&) {}, [&](int rank, Engine& e) {
      std::vector<std::vector<float>> ts = {std::vector<float>(5), std::vector<float>(rank ? 4 : 3)};
      Status s = call(e, allreduceOf(ts));
      CHECK(!s.ok());
      CHECK(s.code == Code::kFailedPrecondition);
      CHECK(s.message.find("tensor 1 has shape [3] on rank 0 but [4] on rank 1") != std::string::npos);
      std::vector<std::vector<float>> counts(rank ? 2 : 1, std::vector<float>(2));
      s = call(e, allreduceOf(counts));
      CHECK(!s.ok());
      CHECK(s.message.find("tensors=1") != std::string::npos);
      // The ring is still in step: a matching call works.
      std::vector<std::vector<float>> good = {std::vector<float>(4, 1.0f)};
      CHECK(call(e, allreduceOf(good)).ok());
      CHECK_EQ(good[0][3], 2.0f);
    });
  }
}

TEST(engine_mismatched_dtype_and_op) {
  withEngines(2, allModes()[1], [](Config&) {}, [&](int rank, Engine& e) {
    std::vector<std::vector<float>> ts = {std::vector<float>(4)};
    Request r = allreduceOf(ts, rank ? ReduceOp::kMax : ReduceOp::kSum);
    Status s = call(e, std::move(r));
    CHECK(!s.ok());
    CHECK(s.message.find("op=sum") != std::string::npos && s.message.find("op=max") != std::string::npos);
    // Each side's op name is quoted, so a message can tell what each rank was doing.
    CHECK(s.message.find("('grads') but rank 1") != std::string::npos);
  });
}

TEST(engine_allgather_and_broadcast) {
  withEngines(3, allModes()[1], [](Config&) {}, [&](int rank, Engine& e) {
    std::vector<int64_t> mine(static_cast<size_t>(rank) * 2, rank);  // shape [rank, 2]
    std::vector<int64_t> gathered;
    Request g;
    g.kind = OpKind::kAllgather;
    g.name = "ag";
    g.type = DataType::kInt64;
    g.tensors.push_back({mine.data(), nullptr, mine.size() * 8, {rank, 2}});
    g.allocate = [&](const std::vector<int64_t>& dims, std::string*) -> void* {
      int64_t rows = 0;
      for (auto d : dims) rows += d;
      gathered.resize(static_cast<size_t>(rows) * 2);
      return gathered.data();
    };
    CHECK(call(e, std::move(g)).ok());
    CHECK_EQ(gathered.size(), size_t{6});
    CHECK_EQ(gathered[0], 1);
    CHECK_EQ(gathered[5], 2);
    std::vector<double> b(1000, rank == 2 ? 7.5 : 0.0);
    Request br;
    br.kind = OpKind::kBroadcast;
    br.name = "bc";
    br.type = DataType::kFloat64;
    br.root = 2;
    br.tensors.push_back({b.data(), b.data(), b.size() * 8, {1000}});
    CHECK(call(e, std::move(br)).ok());
    CHECK_EQ(b[999], 7.5);
  });
}

TEST(engine_dead_peer_fails_fast_with_its_rank) {
  for (const Mode& m : allModes()) {
    auto store = std::make_shared<HashStore>();
    std::string job = uniqueJob();
    spawn(3, [&](int r) {
      Config c = rankConfig(r, 3, m, job);
      c.collectiveTimeout = 20;
      auto ps = std::make_shared<PrefixStore>(job, store);
      auto transport = connectRing(c, *ps);
      if (r == 1) {
        // Rank 1 "dies": its connections close without a word.
        transport.reset();
        return;
      }
      Engine e(c, std::move(transport), ps);
      auto start = Clock::now();
      std::vector<std::vector<float>> ts = {std::vector<float>(1 << 20, 1.0f)};
      Status s = call(e, allreduceOf(ts));
      double took = std::chrono::duration<double>(Clock::now() - start).count();
      CHECK(!s.ok());
      CHECK(s.code == Code::kUnavailable);
      CHECK(took < 10);
      // Rank 2 hears from rank 1 directly; rank 0 either directly or through the store's abort note.
      CHECK(s.message.find("rank 1") != std::string::npos);
      // Every later collective fails at once with the same reason.
      Status again = call(e, allreduceOf(ts));
      CHECK(!again.ok() && again.message == s.message);
    });
  }
}

TEST(engine_stalled_peer_times_out) {
  for (const Mode& m : allModes()) {
    withEngines(2, m, [](Config& c) { c.collectiveTimeout = 1; }, [&](int rank, Engine& e) {
      if (rank == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // alive, but never joins
        return;
      }
      std::vector<std::vector<float>> ts = {std::vector<float>(100, 1.0f)};
      auto start = Clock::now();
      Status s = call(e, allreduceOf(ts));
      double took = std::chrono::duration<double>(Clock::now() - start).count();
      CHECK(!s.ok());
      CHECK(s.message.find("rank 1 stopped answering for 1 s (it may be stopped, swapped out or hung") !=
            std::string::npos);
      CHECK(took >= 0.9 && took < 5);
    });
  }
}

namespace {

// What a rank sees of the rendezvous store once rank 0 is stopped (SIGSTOP, swapped out): after
// freeze() no request is answered; each one waits until its deadline, or for `kUnanswered`
// seconds (TcpStore's store_request_timeout) when it has none, then fails.
class FreezableStore : public Store {
 public:
  static constexpr double kUnanswered = 8;
  explicit FreezableStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  void freeze() { frozen_ = true; }
  void set(const std::string& key, const std::string& value) override {
    hang(Deadline::after(kUnanswered));
    inner_->set(key, value);
  }
  std::string get(const std::string& key, Deadline deadline) override {
    hang(deadline);
    return inner_->get(key, deadline);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    hang(Deadline::after(kUnanswered));
    return inner_->add(key, delta);
  }
  bool tryGet(const std::string& key, std::string* value) override {
    hang(Deadline::after(kUnanswered));
    return inner_->tryGet(key, value);
  }
  void set(const std::string& key, const std::string& value, Deadline deadline) override {
    hang(deadline);
    inner_->set(key, value);
  }
  bool tryGet(const std::string& key, std::string* value, Deadline deadline) override {
    hang(deadline);
    return inner_->tryGet(key, value);
  }

 private:
  void hang(Deadline deadline) {
    if (!frozen_) return;
    const Deadline mine = Deadline::after(kUnanswered);
    std::this_thread::sleep_until(std::min(deadline.time(), mine.time()));
    throw Error(Code::kDeadlineExceeded, "the store did not answer");
  }
  std::shared_ptr<Store> inner_;
  std::atomic<bool> frozen_{false};
};

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

// Rank 0 is stopped (SIGSTOP) mid-job, and with it the rendezvous store it serves: rank 1's
// collective fails within its timeout and a little more (the failure's report to the store is
// short), saying that rank 0 stopped answering, and the engine shuts down at once although its
// stall watch was talking to the unanswering store when the collective failed (issue 33, item 10).
TEST(engine_frozen_peer_and_store_bound_the_failure_and_the_shutdown) {
  auto shared = std::make_shared<HashStore>();
  std::string job = uniqueJob();
  std::atomic<bool> done{false};
  spawn(2, [&](int r) {
    Config c = rankConfig(r, 2, allModes()[1], job);
    c.collectiveTimeout = 1;
    c.stallWarning = 10;  // the default: marks the store after 1 s
    auto ps = std::make_shared<PrefixStore>(job, shared);
    auto store = std::make_shared<FreezableStore>(ps);
    auto e = std::make_unique<Engine>(c, connectRing(c, *ps), store);
    storeBarrier(*ps, "engines-up", r, 2, Deadline::after(30));
    if (r == 0) {  // frozen: never submits, keeps its connections open until rank 1 is done
      for (auto until = Deadline::after(30); !done && !until.expired();) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return;
    }
    store->freeze();
    std::vector<std::vector<float>> ts = {std::vector<float>(100, 1.0f)};
    auto start = Clock::now();
    Status s = call(*e, allreduceOf(ts));
    const double failedAfter = secondsSince(start);
    auto stopping = Clock::now();
    e.reset();
    const double shutdownTook = secondsSince(stopping);
    done = true;
    std::fprintf(stderr, "failed after %.1f s, shut down in %.1f s: %s\n", failedAfter, shutdownTook, s.message.c_str());
    CHECK(!s.ok());
    CHECK(failedAfter < c.collectiveTimeout + 3);
    CHECK(shutdownTook < 1);
    CHECK(s.message.find("rank 0 stopped answering for 1 s (it may be stopped, swapped out or hung") !=
          std::string::npos);
  });
}

// A stand-in for cuda/pinned_staging: the tensors are "elsewhere" (the engine must not touch
// them), and this copies them through a small host buffer in pieces of `pieceBytes`, calling the
// engine's host collective on each piece, as the GPU path does with pinned memory.
std::function<void(const HostCollective&)> stageThrough(std::vector<std::vector<float>>* tensors, size_t pieceBytes) {
  return [tensors, pieceBytes](const HostCollective& collective) {
    std::vector<char> bounce(pieceBytes);
    IoList all;
    for (auto& t : *tensors) all.push_back({t.data(), t.size() * 4});
    const size_t total = totalBytes(all);
    for (size_t at = 0; at < total; at += pieceBytes) {
      const size_t n = std::min(pieceBytes, total - at);
      IoList piece = sliceIo(all, at, n);
      size_t k = 0;
      for (const auto& io : piece) std::memcpy(bounce.data() + (k += io.iov_len) - io.iov_len, io.iov_base, io.iov_len);
      collective(bounce.data(), n);
      k = 0;
      for (const auto& io : piece) std::memcpy(io.iov_base, bounce.data() + (k += io.iov_len) - io.iov_len, io.iov_len);
    }
  };
}

TEST(engine_staged_tensors_reduce_piece_by_piece) {
  for (int size : {1, 2, 3}) {
    withEngines(size, allModes()[size % 2], [](Config&) {}, [&](int rank, Engine& e) {
      // Pieces of 4000 bytes cut tensors of 1, 4099 and 0 elements at unaligned places.
      std::vector<std::vector<float>> ts = {std::vector<float>(1), std::vector<float>(4099), std::vector<float>(0),
                                            std::vector<float>(2500)};
      for (auto& t : ts) {
        for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>((rank + 1) * (i % 7));
      }
      // Only the sizes reach the engine: null pointers make any direct access crash.
      Request r;
      r.kind = OpKind::kAllreduce;
      r.name = "staged";
      r.op = ReduceOp::kMean;
      for (auto& t : ts) r.tensors.push_back({nullptr, nullptr, t.size() * 4, {static_cast<int64_t>(t.size())}});
      r.staged = stageThrough(&ts, 4000);
      CHECK(call(e, std::move(r)).ok());
      const float mean = (size + 1) / 2.0f;  // of 1..size
      for (auto& t : ts) {
        for (size_t i = 0; i < t.size(); ++i) CHECK_EQ(t[i], mean * static_cast<float>(i % 7));
      }
      // Broadcast from the last rank through the same path.
      std::vector<std::vector<float>> b = {std::vector<float>(3001, static_cast<float>(rank))};
      Request br;
      br.kind = OpKind::kBroadcast;
      br.name = "staged-bc";
      br.root = size - 1;
      br.tensors.push_back({nullptr, nullptr, 3001 * 4, {3001}});
      br.staged = stageThrough(&b, 1024);
      CHECK(call(e, std::move(br)).ok());
      CHECK_EQ(b[0][0], static_cast<float>(size - 1));
      CHECK_EQ(b[0][3000], static_cast<float>(size - 1));
    });
  }
}

TEST(engine_staged_failure_and_unsupported_kind_are_errors) {
  withEngines(1, allModes()[0], [](Config&) {}, [&](int, Engine& e) {
    Request r;
    r.kind = OpKind::kAllreduce;
    r.name = "broken-device";
    r.tensors.push_back({nullptr, nullptr, 16, {4}});
    r.staged = [](const HostCollective&) { throw Error(Code::kInternal, "cudaMemcpyAsync: an illegal address"); };
    Status s = call(e, std::move(r));
    CHECK(!s.ok() && s.message.find("illegal address") != std::string::npos);
    Request g;
    g.kind = OpKind::kAllgather;
    g.name = "gather-device";
    g.tensors.push_back({nullptr, nullptr, 16, {4}});
    g.staged = [](const HostCollective&) {};
    s = call(e, std::move(g));
    CHECK(!s.ok() && s.code == Code::kInvalidArgument && s.message.find("only allreduce and broadcast") != std::string::npos);
    // The engine is still usable.
    std::vector<std::vector<float>> ok = {std::vector<float>(3, 2.0f)};
    CHECK(call(e, allreduceOf(ok)).ok());
  });
}

TEST(engine_device_and_host_tensors_on_different_ranks_fail_together) {
  // A device (staged) allreduce runs the ring piece by piece; a small host one is gathered.
  // Ranks that mix them must fail like any other mismatch, not lose the ring.
  withEngines(2, allModes()[0], [](Config&) {}, [&](int rank, Engine& e) {
    std::vector<std::vector<float>> ts = {std::vector<float>(8, 1.0f)};
    Request r = allreduceOf(ts);
    if (rank == 0) {
      r.tensors[0].in = r.tensors[0].out = nullptr;
      r.staged = stageThrough(&ts, 16);
    }
    Status s = call(e, std::move(r));
    CHECK(s.code == Code::kFailedPrecondition);
    CHECK(s.message.find("device tensors") != std::string::npos);
    std::vector<std::vector<float>> good = {std::vector<float>(3, 2.0f)};
    CHECK(call(e, allreduceOf(good)).ok());
    CHECK_EQ(good[0][2], 4.0f);
  });
}

TEST(rendezvous_missing_rank_times_out_clearly) {
  auto store = std::make_shared<HashStore>();
  std::string job = uniqueJob();
  Config c = rankConfig(0, 2, allModes()[0], job);
  c.rendezvousTimeout = 0.5;
  PrefixStore ps(job, store);
  CHECK_THROWS(connectRing(c, ps), "no word from rank 1");
}
