// hvd.join through the engine (engine/join.h): a joined rank takes part in the others' allreduces
// with zeros (ring and gathered, fused lists, hierarchical), other collectives fail on the ranks
// that call them while a rank has joined, and every rank learns the rank that joined last.
#include <cstdint>

#include "engine/join.h"
#include "tests/ring_helpers.h"

using namespace tfring;
using namespace tfring_test;

namespace {

// Rank r's element i at step s: small integers, exact in float32 whatever the order of sums.
float joinValue(int rank, int step, size_t i) { return static_cast<float>((rank + 1) * 10 + step + i % 7); }

// One join; returns the rank that joined last (or -1 on an error, which the test then sees).
int joinNow(Engine& e, Status* status) {
  int last = -1;
  Request r;
  r.kind = OpKind::kJoin;
  r.name = "join";
  r.joined = [&last](int rank) { last = rank; };
  *status = call(e, std::move(r));
  return last;
}

// Rank r runs 1 + r steps, each one allreduce of a large (ring) and a small (gathered) tensor,
// then joins. Step s sums the ranks still running (r >= s); a mean divides by the job's size.
void stepsThenJoin(int rank, int size, Engine& e, ReduceOp op) {
  for (int step = 0; step <= rank; ++step) {
    std::vector<std::vector<float>> ts = {std::vector<float>(50000), std::vector<float>(9)};
    for (auto& t : ts) {
      for (size_t i = 0; i < t.size(); ++i) t[i] = joinValue(rank, step, i);
    }
    CHECK(call(e, allreduceOf(ts, op)).ok());
    for (auto& t : ts) {
      for (size_t i = 0; i < t.size(); i += 997) {
        double sum = 0;
        for (int q = step; q < size; ++q) sum += joinValue(q, step, i);
        CHECK_EQ(t[i], static_cast<float>(op == ReduceOp::kMean ? sum / size : sum));
      }
    }
  }
  Status s;
  CHECK_EQ(joinNow(e, &s), size - 1);
  CHECK(s.ok());
}

}  // namespace

TEST(join_takes_part_in_allreduces_with_zeros_on_every_transport) {
  for (int size : {2, 3}) {
    for (const Mode& m : allModes()) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
        withEngines(size, m, [&](int rank, Engine& e) { stepsThenJoin(rank, size, e, op); });
      }
    }
  }
}

TEST(join_takes_part_in_hierarchical_allreduces) {
  auto store = std::make_shared<HashStore>();
  const std::string job = uniqueJob();
  spawn(4, [&](int r) {
    Config c = rankConfig(r, 4, Mode{"auto", true, "shm-and-tcp", 2}, job);
    c.allreduceAlgorithm = "hierarchical";
    auto ps = std::make_shared<PrefixStore>(job, store);
    Engine e(c, connectRings(c, *ps), ps);
    CHECK(e.transportName().find("hierarchical") != std::string::npos);
    stepsThenJoin(r, 4, e, ReduceOp::kSum);
    storeBarrier(*ps, "test-end", r, 4, Deadline::after(30));
  });
}

TEST(collectives_other_than_a_sum_fail_while_a_rank_has_joined) {
  withEngines(3, allModes()[0], [&](int rank, Engine& e) {
    Status s;
    if (rank == 0) {
      CHECK_EQ(joinNow(e, &s), 2);  // ranks 1 and 2 join at the same collective: the highest
      CHECK(s.ok());
      return;
    }
    std::vector<std::vector<float>> ts = {std::vector<float>(5, 1.0f)};
    Status refused = call(e, allreduceOf(ts, ReduceOp::kMax));
    CHECK(refused.code == Code::kFailedPrecondition);
    CHECK(refused.message.find("rank 0 has joined (hvd.join)") != std::string::npos);
    CHECK(refused.message.find("not allreduce with op max") != std::string::npos);
    Request barrier;
    barrier.kind = OpKind::kBarrier;
    barrier.name = "epoch end";
    refused = call(e, std::move(barrier));
    CHECK(refused.code == Code::kFailedPrecondition && refused.message.find("not barrier") != std::string::npos);
    // Ranks that disagree among themselves fail too, and the ring stays usable.
    std::vector<std::vector<float>> odd = {std::vector<float>(rank == 1 ? 4 : 6, 1.0f)};
    refused = call(e, allreduceOf(odd));
    CHECK(refused.code == Code::kFailedPrecondition);
    CHECK(refused.message.find("have joined") != std::string::npos);
    CHECK(call(e, allreduceOf(ts)).ok());
    CHECK_EQ(ts[0][0], 2.0f);  // ranks 1 and 2; rank 0 added zeros
    CHECK_EQ(joinNow(e, &s), 2);
    CHECK(s.ok());
  });
}

TEST(join_of_one_rank_returns_at_once) {
  withEngines(1, allModes()[0], [&](int, Engine& e) {
    Status s;
    CHECK_EQ(joinNow(e, &s), 0);
    CHECK(s.ok());
  });
}

TEST(join_facts_survive_their_encoding) {
  Request r;
  r.kind = OpKind::kAllreduce;
  r.type = DataType::kBFloat16;
  r.op = ReduceOp::kMean;
  r.tensors.push_back({nullptr, nullptr, 0, {3, 0, 300}});
  r.tensors.push_back({nullptr, nullptr, 2, {}});
  JoinFacts f = decodeJoinFacts(encodeJoinFacts(r));
  CHECK(f.kind == OpKind::kAllreduce && f.type == DataType::kBFloat16 && f.op == ReduceOp::kMean && !f.staged);
  CHECK(f.shapes.size() == 2 && f.shapes[0] == std::vector<int64_t>({3, 0, 300}) && f.shapes[1].empty());
  bool threw = false;
  try {
    decodeJoinFacts(std::string("\x80", 1));
  } catch (const Error&) {
    threw = true;
  }
  CHECK(threw);
  CHECK_EQ(lastJoined({4, 9, 9, 2}), 2);
}
