// The hierarchical allreduce (algorithms/allreduce_hierarchical.h) and the layouts that allow it
// (transport/host_layout.h), on thread-ranks whose "hosts" are host ids: shared memory inside a
// host, TCP between hosts, as on real machines.
#include <cstring>
#include <mutex>

#include "algorithms/allreduce_hierarchical.h"
#include "tests/ring_helpers.h"
#include "transport/host_layout.h"

using namespace tfring;
using namespace tfring_test;

namespace {

// Runs fn(rank, rings) on hosts x perHost thread-ranks placed host by host.
void withRings(int hosts, int perHost, const std::string& algorithm,
               const std::function<void(int, Rings&)>& fn, bool mixedRing = true) {
  auto store = std::make_shared<HashStore>();
  const std::string job = uniqueJob();
  const int size = hosts * perHost;
  spawn(size, [&](int r) {
    Mode mode{"auto", true, "shm-and-tcp", perHost, mixedRing};
    Config c = rankConfig(r, size, mode, job);
    c.allreduceAlgorithm = algorithm;
    PrefixStore ps(job, store);
    Rings rings = connectRings(c, ps);
    fn(r, rings);
    storeBarrier(ps, "test-end", r, size, Deadline::after(30));
  });
}

std::vector<std::string> machines(std::initializer_list<const char*> names) { return {names.begin(), names.end()}; }

}  // namespace

TEST(host_layout_reads_hosts_and_ranks_per_host) {
  HostLayout twoByTwo = hostLayout(machines({"a", "a", "b", "b"}));
  CHECK(twoByTwo.hosts == 2 && twoByTwo.perHost == 2);
  HostLayout threeByOne = hostLayout(machines({"a", "b", "c"}));
  CHECK(threeByOne.hosts == 3 && threeByOne.perHost == 1);
  HostLayout uneven = hostLayout(machines({"a", "a", "b"}));
  CHECK(uneven.hosts == 2 && !uneven.regular());
  HostLayout interleaved = hostLayout(machines({"a", "b", "a", "b"}));
  CHECK(interleaved.hosts == 2 && !interleaved.regular());
  CHECK(hostLayout(machines({"a", "a", "a"})).hosts == 1);
}

TEST(host_layout_decides_the_allreduce) {
  const HostLayout twoByTwo{2, 2}, oneHost{1, 4}, oneRankEach{3, 1}, uneven{2, 0};
  CHECK(useHierarchical("auto", twoByTwo) && useHierarchical("hierarchical", twoByTwo));
  CHECK(!useHierarchical("ring", twoByTwo));
  // Nothing to gain where one of the two levels has a single rank.
  CHECK(!useHierarchical("hierarchical", oneHost) && !useHierarchical("hierarchical", oneRankEach));
  CHECK(!useHierarchical("auto", uneven) && !useHierarchical("ring", uneven));
  CHECK_THROWS(useHierarchical("hierarchical", uneven), "needs the same number of ranks on every host");
}

SWEEP(hierarchical_allreduce_every_dtype_op_and_layout) {
  for (const auto& layout : {std::pair{2, 2}, std::pair{2, 3}, std::pair{3, 2}}) {
    const int hosts = layout.first, perHost = layout.second;
    const int size = hosts * perHost;
    std::mutex mu;
    std::vector<std::vector<uint8_t>> results(size);
    withRings(hosts, perHost, "hierarchical", [&](int rank, Rings& rings) {
      CHECK(rings.hierarchical() && rings.localSize == perHost && rings.hosts == hosts);
      for (DataType type : kTypes) {
        for (ReduceOp op : kOps) {
          for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}, size_t{100003}}) {
            const size_t bytes = count * dataTypeSize(type);
            std::vector<uint8_t> in(bytes + 1), out(bytes + 1);
            for (size_t i = 0; i < count; ++i) setElem(in.data(), i, type, inputValue(rank, i, op));
            hierarchicalAllreduce(rings.local.get(), perHost, rings.cross.get(), hosts, {{in.data(), bytes}},
                                  {{out.data(), bytes}}, type, op, Deadline::after(30));
            const std::string bad = mismatch(out, size, count, type, op);
            if (!bad.empty()) throw Failure(std::to_string(hosts) + "x" + std::to_string(perHost) + " " + bad);
            if (type == DataType::kFloat32 && op == ReduceOp::kMean && count == 100003) {
              std::lock_guard<std::mutex> lock(mu);
              results[rank] = out;
            }
          }
        }
      }
    });
    for (int r = 1; r < size; ++r) CHECK(results[r] == results[0]);  // bit for bit on every rank
  }
}

SWEEP(hierarchical_mean_rounds_once) {
  // 6 ranks: a divisor that is not a power of two, so a second rounding would show.
  for (const auto& layout : {std::pair{2, 3}, std::pair{3, 2}}) {
    const int hosts = layout.first, perHost = layout.second, size = hosts * perHost;
    withRings(hosts, perHost, "hierarchical", [&](int rank, Rings& rings) {
      for (DataType type : kMeanRoundingTypes) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000003}}) {
          const size_t elem = dataTypeSize(type);
          std::vector<uint8_t> in(count * elem + 1), out(count * elem + 1);
          for (size_t i = 0; i < count; ++i) setElem(in.data(), i, type, meanRoundingInput(type, size, rank, i));
          hierarchicalAllreduce(rings.local.get(), perHost, rings.cross.get(), hosts,
                                splitPieces(in.data(), count, elem), splitPieces(out.data(), count, elem), type,
                                ReduceOp::kMean, Deadline::after(60));
          const std::string bad = meanRoundingMismatch(out.data(), count, type, size);
          if (!bad.empty()) throw Failure(std::to_string(hosts) + "x" + std::to_string(perHost) + " " + bad);
        }
      }
    });
  }
}

TEST(hierarchical_rings_name_both_levels) {
  withRings(2, 2, "auto", [&](int, Rings& rings) {
    CHECK(rings.hierarchical());
    CHECK(rings.name().find("allreduce hierarchical") != std::string::npos);
    CHECK(rings.name().find("across 2 hosts") != std::string::npos);
  });
  withRings(2, 2, "ring", [&](int, Rings& rings) { CHECK(!rings.hierarchical()); });
}

TEST(hierarchical_rings_follow_mixed_ring_off_tcp_everywhere) {
  withRings(2, 2, "auto", [&](int, Rings& rings) {
    CHECK(rings.hierarchical());
    CHECK_EQ(rings.world->name(), std::string("tcp"));
    CHECK_EQ(rings.local->name(), std::string("tcp"));
    CHECK_EQ(rings.cross->name(), std::string("tcp"));
  }, false);
}

TEST(hierarchical_forced_on_an_uneven_layout_fails_every_rank) {
  auto store = std::make_shared<HashStore>();
  const std::string job = uniqueJob();
  std::vector<std::string> errors(3);
  spawn(3, [&](int r) {
    Config c = testConfig(r, 3, job);
    c.hostId = r < 2 ? "host0" : "host1";  // two ranks on one host, one on the other
    c.allreduceAlgorithm = "hierarchical";
    PrefixStore ps(job, store);
    try {
      connectRings(c, ps);
    } catch (const Error& e) {
      errors[r] = e.what();
    }
  });
  for (const auto& e : errors) CHECK(e.find("needs the same number of ranks on every host") != std::string::npos);
}

TEST(engine_allreduces_fused_tensors_hierarchically) {
  auto store = std::make_shared<HashStore>();
  const std::string job = uniqueJob();
  spawn(4, [&](int r) {
    Config c = rankConfig(r, 4, Mode{"auto", true, "shm-and-tcp", 2}, job);
    c.fusionThresholdBytes = 4096;
    auto ps = std::make_shared<PrefixStore>(job, store);
    Engine e(c, connectRings(c, *ps), ps);
    CHECK(e.transportName().find("hierarchical") != std::string::npos);
    std::vector<std::vector<float>> ts(300, std::vector<float>(100));
    for (size_t k = 0; k < ts.size(); ++k) {
      for (size_t i = 0; i < ts[k].size(); ++i) ts[k][i] = static_cast<float>(r * 4 + k + i);
    }
    CHECK(call(e, allreduceOf(ts, ReduceOp::kMean)).ok());
    // The mean over ranks of r*4 + k + i is 6 + k + i: exact in float32.
    for (size_t k = 0; k < ts.size(); k += 7) {
      for (size_t i = 0; i < ts[k].size(); i += 13) CHECK_EQ(ts[k][i], static_cast<float>(6 + k + i));
    }
    storeBarrier(*ps, "test-end", r, 4, Deadline::after(30));
  });
}

TEST(engine_hierarchical_dead_peer_fails_fast) {
  auto store = std::make_shared<HashStore>();
  const std::string job = uniqueJob();
  spawn(4, [&](int r) {
    Config c = rankConfig(r, 4, Mode{"auto", true, "shm-and-tcp", 2}, job);
    c.collectiveTimeout = 20;
    auto ps = std::make_shared<PrefixStore>(job, store);
    Rings rings = connectRings(c, *ps);
    if (r == 3) return;  // rank 3 "dies": every ring's connections close without a word
    Engine e(c, std::move(rings), ps);
    const auto start = Clock::now();
    std::vector<std::vector<float>> ts = {std::vector<float>(1 << 20, 1.0f)};
    Status s = call(e, allreduceOf(ts));
    CHECK(!s.ok() && s.code == Code::kUnavailable);
    CHECK(std::chrono::duration<double>(Clock::now() - start).count() < 10);
    // Rank 2 shares rank 3's host ring, rank 1 its ring across hosts: both hear from it directly.
    if (r != 0) CHECK(s.message.find("rank 3") != std::string::npos);
  });
}
