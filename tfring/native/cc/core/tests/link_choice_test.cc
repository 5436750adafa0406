// Per-link transport choice (transport/link_choice.h) and rings that mix link kinds: shared
// memory between ranks of one "host", TCP between hosts, all thread-ranks in this process.
#include <vector>

#include "algorithms/allreduce_ring.h"
#include "tests/ring_helpers.h"
#include "transport/link_choice.h"
#include "transport/ring_transport.h"

using namespace tfring;
using namespace tfring_test;

namespace {

std::vector<Endpoint> ringOn(const std::vector<std::string>& machines) {
  std::vector<Endpoint> ring;
  for (size_t r = 0; r < machines.size(); ++r) ring.push_back({"10.0.0.1", 1000 + int(r), machines[r], 100 + int(r)});
  return ring;
}

const LinkKind kShm = LinkKind::kShm, kTcp = LinkKind::kTcp;

}  // namespace

TEST(link_choice_one_host_follows_the_configured_transport) {
  auto oneHost = ringOn({"a", "a", "a"});
  CHECK(planRing("auto", oneHost, true) == std::vector<LinkKind>({kShm, kShm, kShm}));
  CHECK(planRing("shm", oneHost, true) == std::vector<LinkKind>({kShm, kShm, kShm}));
  CHECK(planRing("tcp", oneHost, true) == std::vector<LinkKind>({kTcp, kTcp, kTcp}));
}

TEST(link_choice_is_made_per_link_across_hosts) {
  // plan[r] carries r -> r+1: links inside a host share memory, links between hosts are TCP.
  CHECK(planRing("auto", ringOn({"a", "a", "b", "b"}), true) == std::vector<LinkKind>({kShm, kTcp, kShm, kTcp}));
  CHECK(planRing("auto", ringOn({"a", "b", "a"}), true) == std::vector<LinkKind>({kTcp, kTcp, kShm}));
  CHECK(planRing("tcp", ringOn({"a", "a", "b"}), true) == std::vector<LinkKind>({kTcp, kTcp, kTcp}));
  // mixed_ring off: auto across hosts is TCP on every link.
  CHECK(planRing("auto", ringOn({"a", "a", "b", "b"}), false) == std::vector<LinkKind>({kTcp, kTcp, kTcp, kTcp}));
  CHECK(planRing("auto", ringOn({"a", "a", "a"}), false) == std::vector<LinkKind>({kShm, kShm, kShm}));
  // The rule the hierarchical allreduce's rings inherit from the world ring.
  CHECK_EQ(ringTransport("auto", ringOn({"a", "a", "b", "b"}), false), std::string("tcp"));
  CHECK_EQ(ringTransport("auto", ringOn({"a", "a", "b", "b"}), true), std::string("auto"));
  CHECK_EQ(ringTransport("auto", ringOn({"a", "a"}), false), std::string("auto"));
  CHECK(linkEnabled(kTcp, "auto", ringOn({"a"})[0], ringOn({"b"})[0]));
  CHECK(!linkEnabled(kShm, "auto", ringOn({"a"})[0], ringOn({"b"})[0]));
}

TEST(link_choice_refuses_shm_between_hosts_naming_the_ranks) {
  CHECK_THROWS(planRing("shm", ringOn({"a", "a", "b"}), true),
               "transport 'shm' was requested but the ranks run on several hosts (rank 1 on a, rank 2 on b)");
}

TEST(ring_across_hosts_is_tcp_everywhere_without_mixed_ring) {
  // ranks on two hosts, transport=auto, mixed_ring=0 -> every link TCP.
  Mode across{"auto", true, "auto-across-hosts", 2, false};
  withRing(4, across, [&](int rank, Transport* t, const Config&) {
    auto* ring = dynamic_cast<RingTransport*>(t);
    CHECK(ring != nullptr);
    CHECK(ring->toRight().kind() == kTcp && ring->fromLeft().kind() == kTcp);
    CHECK_EQ(t->name(), std::string("tcp"));
    std::vector<float> x(100000, static_cast<float>(rank)), y(x.size());
    ringAllreduce(t, 4, {{x.data(), x.size() * 4}}, {{y.data(), y.size() * 4}}, DataType::kFloat32, ReduceOp::kSum,
                  Deadline::after(30));
    CHECK_EQ(y[12345], 6.0f);
  });
}

TEST(ring_mixes_shm_and_tcp_links) {
  for (bool singleCopy : {true, false}) {
    Mode mixed{"auto", singleCopy, "mixed", 2};
    // Ranks 0, 1 on host0 and 2, 3 on host1: 0->1 and 2->3 shared memory, 1->2 and 3->0 TCP.
    withRing(4, mixed, [&](int rank, Transport* t, const Config&) {
      auto* ring = dynamic_cast<RingTransport*>(t);
      CHECK(ring != nullptr);
      const bool sendsShm = rank % 2 == 0;
      CHECK(ring->toRight().kind() == (sendsShm ? kShm : kTcp));
      CHECK(ring->fromLeft().kind() == (sendsShm ? kTcp : kShm));
      const std::string shm = singleCopy ? "shm (single-copy)" : "shm";
      const std::string left = std::to_string((rank + 3) % 4), right = std::to_string((rank + 1) % 4);
      CHECK_EQ(t->name(), sendsShm ? shm + " to rank " + right + ", tcp from rank " + left
                                   : "tcp to rank " + right + ", " + shm + " from rank " + left);
      // Big enough for single-copy records, several ring wraps and every pipelining path.
      std::vector<float> x(3000000), y(x.size());
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rank + i % 7);
      ringAllreduce(t, 4, {{x.data(), x.size() * 4}}, {{y.data(), y.size() * 4}}, DataType::kFloat32, ReduceOp::kSum,
                    Deadline::after(30));
      for (size_t i = 0; i < y.size(); i += 997) CHECK_EQ(y[i], static_cast<float>(6 + 4 * (i % 7)));
    });
  }
}
