// Tickets: collectives started now and waited for later, in submission order across ranks.
#include <future>

#include "engine/engine.h"
#include "engine/tickets.h"
#include "tests/ring_helpers.h"

using namespace tfring;
using namespace tfring_test;

namespace {

Status redeemed(Tickets& t, uint64_t ticket) {
  std::promise<Status> p;
  auto f = p.get_future();
  t.redeem(ticket, [&p](const Status& s) { p.set_value(s); });
  return f.get();
}

}  // namespace

TEST(tickets_run_buckets_in_start_order_and_wait_in_any_order) {
  auto store = std::make_shared<HashStore>();
  std::string job = uniqueJob();
  spawn(2, [&](int rank) {
    Config c = rankConfig(rank, 2, allModes()[0], job);
    auto ps = std::make_shared<PrefixStore>(job, store);
    Tickets tickets;
    Engine e(c, connectRing(c, *ps), ps);
    auto submit = [&e](Request r) { e.enqueue(std::move(r)); };
    // Three buckets of different sizes, started back to back; the keep-alive is dropped as each finishes.
    std::vector<std::vector<std::vector<float>>> buckets = {
        {std::vector<float>(1000, rank + 1.0f)}, {std::vector<float>(5, rank * 2.0f)},
        {std::vector<float>(300000, 1.0f), std::vector<float>(7, -1.0f)}};
    std::vector<uint64_t> ids;
    std::vector<std::weak_ptr<void>> kept;
    for (auto& b : buckets) {
      auto keep = std::make_shared<int>(0);
      kept.push_back(keep);
      ids.push_back(tickets.start(allreduceOf(b), keep, submit));
    }
    CHECK_EQ(tickets.outstanding(), size_t{3});
    // Waited for last-first: each still reports its own collective.
    for (int k = 2; k >= 0; --k) CHECK(redeemed(tickets, ids[k]).ok());
    for (auto& w : kept) CHECK(w.expired());
    CHECK_EQ(buckets[0][0][999], 3.0f);
    CHECK_EQ(buckets[1][0][0], 2.0f);
    CHECK_EQ(buckets[2][0][299999], 2.0f);
    CHECK_EQ(buckets[2][1][6], -2.0f);
    CHECK_EQ(tickets.outstanding(), size_t{0});
    storeBarrier(*ps, "test-end", rank, 2, Deadline::after(30));
  });
}

TEST(tickets_report_a_failed_collective_and_refuse_unknown_ones) {
  Tickets tickets;
  Request r;
  r.name = "bucket";
  auto failing = [](Request q) { q.done(Status::error(Code::kUnavailable, "rank 1 is gone")); };
  uint64_t id = tickets.start(std::move(r), nullptr, failing);
  Status s = redeemed(tickets, id);
  CHECK(s.code == Code::kUnavailable);
  CHECK(s.message.find("rank 1 is gone") != std::string::npos);
  Status again = redeemed(tickets, id);
  CHECK(again.code == Code::kInvalidArgument);
  CHECK(again.message.find("unknown or was already waited for") != std::string::npos);
  CHECK(redeemed(tickets, 12345).code == Code::kInvalidArgument);
}

TEST(tickets_waiter_registered_first_runs_when_the_collective_finishes) {
  Tickets tickets;
  Request held;
  uint64_t id = tickets.start(Request{}, nullptr, [&held](Request q) { held = std::move(q); });
  bool ran = false;
  tickets.redeem(id, [&ran](const Status& s) { ran = s.ok(); });
  CHECK(!ran);
  Status twice;
  tickets.redeem(id, [&twice](const Status& s) { twice = s; });  // the first waiter stays
  CHECK(twice.code == Code::kInvalidArgument);
  held.done(Status{});
  CHECK(ran);
  CHECK_EQ(tickets.outstanding(), size_t{0});
}
