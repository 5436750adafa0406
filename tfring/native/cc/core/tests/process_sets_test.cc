// Process sets (process_sets.h): each set a rank belongs to runs on an engine and ring of its own,
// so a set's collective completes while one of the whole job waits for a rank outside the set;
// ids agree on every rank; bad sets and collectives on a set a rank is not in fail naming why.
#include <cstdint>
#include <functional>

#include "process_sets.h"
#include "tests/ring_helpers.h"

using namespace tfring;
using namespace tfring_test;

namespace {

float value(int rank, size_t i) { return static_cast<float>((rank + 1) * 100 + i % 13); }

// Every rank of a 3-rank job adds {0, 2} and {1}; ranks 0 and 2 start an allreduce of the whole
// job, then run allreduces and broadcasts from either member in their set, which complete
// although rank 1 has not started the job's: only then does rank 1 (told through the store)
// start it, and every result is exact.
void setsRunBesideTheJob(const Mode& m) {
  auto store = std::make_shared<HashStore>();
  const std::string job = uniqueJob();
  spawn(3, [&](int r) {
    Config c = rankConfig(r, 3, m, job);
    auto ps = std::make_shared<PrefixStore>(job, store);
    auto world = std::make_shared<Engine>(c, connectRing(c, *ps), ps);
    ProcessSets sets(c, world, ps);
    const int evens = sets.add({2, 0}), odd = sets.add({1});
    CHECK_EQ(evens, 1);
    CHECK_EQ(odd, 2);
    CHECK(sets.ranks(evens) == std::vector<int>({0, 2}));
    std::vector<std::vector<float>> whole = {std::vector<float>(30000)};
    for (size_t i = 0; i < whole[0].size(); ++i) whole[0][i] = value(r, i);
    if (r == 1) {
      std::vector<std::vector<float>> alone = {{value(1, 0)}};
      CHECK(call(*sets.engine(odd), allreduceOf(alone)).ok());
      CHECK_EQ(alone[0][0], value(1, 0));
      ps->get("evens-done", Deadline::after(30));  // only now does rank 1 start the job's allreduce
      CHECK(call(*world, allreduceOf(whole)).ok());
    } else {
      std::promise<Status> worldDone;
      Request w = allreduceOf(whole);
      w.done = [&worldDone](const Status& s) { worldDone.set_value(s); };
      world->enqueue(std::move(w));
      for (size_t n : {size_t(7), size_t(40000)}) {  // gathered and ring
        std::vector<std::vector<float>> mine = {std::vector<float>(n)};
        for (size_t i = 0; i < n; ++i) mine[0][i] = value(r, i);
        CHECK(call(*sets.engine(evens), allreduceOf(mine)).ok());
        for (size_t i = 0; i < n; i += 991) CHECK_EQ(mine[0][i], value(0, i) + value(2, i));
      }
      for (int root : {0, 1}) {  // positions in the set: job ranks 0 and 2
        std::vector<float> data(5000, static_cast<float>(r));
        Request b;
        b.kind = OpKind::kBroadcast;
        b.name = "weights";
        b.root = root;
        b.tensors.push_back({data.data(), data.data(), data.size() * 4, {5000}});
        CHECK(call(*sets.engine(evens), std::move(b)).ok());
        CHECK_EQ(data[4999], static_cast<float>(2 * root));
      }
      if (r == 0) ps->set("evens-done", "1");
      CHECK(worldDone.get_future().get().ok());
    }
    for (size_t i = 0; i < whole[0].size(); i += 997) CHECK_EQ(whole[0][i], value(0, i) + value(1, i) + value(2, i));
    storeBarrier(*ps, "test-end", r, 3, Deadline::after(30));
  });
}

// Runs fn(rank, sets) on `size` thread-ranks over TCP, each with the whole job's engine as set 0.
void withSets(int size, const std::function<void(int, ProcessSets&)>& fn) {
  auto store = std::make_shared<HashStore>();
  const std::string job = uniqueJob();
  spawn(size, [&](int r) {
    Config c = rankConfig(r, size, allModes()[0], job);
    auto ps = std::make_shared<PrefixStore>(job, store);
    ProcessSets sets(c, std::make_shared<Engine>(c, connectRing(c, *ps), ps), ps);
    fn(r, sets);
    storeBarrier(*ps, "test-end", r, size, Deadline::after(30));
  });
}

}  // namespace

TEST(process_sets_run_beside_the_whole_job_on_every_transport) {
  for (const Mode& m : allModes()) setsRunBesideTheJob(m);
}

TEST(process_sets_refuse_bad_sets_and_ranks_outside_them) {
  withSets(2, [](int r, ProcessSets& sets) {
    CHECK_EQ(sets.engine(0)->size(), 2);
    CHECK_THROWS(sets.add({}), "at least one rank");
    CHECK_THROWS(sets.add({0, 0}), "names a rank twice");
    CHECK_THROWS(sets.add({0, 2}), "outside the job's 0..1");
    CHECK_THROWS(sets.add({1, 0}), "exists already (id 0)");
    const int first = sets.add({0});
    CHECK_EQ(sets.idOf({0}), first);
    CHECK_EQ(sets.idOf({1}), -1);
    if (r == 1) CHECK_THROWS(sets.engine(first), "rank 1 is not in process set 1 (job ranks 0)");
    CHECK_THROWS(sets.engine(7), "no process set with id 7");
    CHECK(!sets.remove(0));
    CHECK(sets.remove(first));
    CHECK(!sets.remove(first));
    CHECK_THROWS(sets.ranks(first), "no process set with id 1");
    CHECK_EQ(sets.add({0}), 2);  // ids are not reused
  });
}

TEST(process_sets_name_themselves_in_failures) {
  withSets(3, [](int r, ProcessSets& sets) {
    const int pair = sets.add({0, 1});
    if (r < 2) {  // ranks that pass different shapes fail with the set named, and the set stays usable
      std::vector<std::vector<float>> t = {std::vector<float>(r == 0 ? 4 : 5)};
      const Status s = call(*sets.engine(pair), allreduceOf(t));
      CHECK(!s.ok());
      CHECK(s.message.find("process set 1 (job ranks 0 1") == 0);
      std::vector<std::vector<float>> u = {{1.0f}};
      CHECK(call(*sets.engine(pair), allreduceOf(u)).ok());
      CHECK_EQ(u[0][0], 2.0f);
    }
  });
}

TEST(process_sets_name_job_ranks_not_positions) {
  // In the set {0, 2}, job rank 2 is position 1: every message names it as rank 2, as its links do.
  withSets(3, [](int r, ProcessSets& sets) {
    const int evens = sets.add({0, 2});
    if (r == 1) return;
    std::vector<std::vector<float>> t = {std::vector<float>(r == 0 ? 4 : 5)};
    const Status s = call(*sets.engine(evens), allreduceOf(t));
    CHECK(!s.ok());
    CHECK(s.message.find("process set 1 (job ranks 0 2): ") == 0);
    CHECK(s.message.find("has shape [4] on rank 0 but [5] on rank 2") != std::string::npos);
    CHECK(s.message.find("position") == std::string::npos);
  });
}
