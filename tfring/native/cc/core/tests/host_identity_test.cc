// Host identity (transport/host_identity.h): what makes two ranks one host, and the setting
// host_id that replaces detection, down to the links thread-ranks build.
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/bootstrap.h"
#include "tests/ring_helpers.h"
#include "tests/test_framework.h"
#include "transport/host_identity.h"
#include "transport/ring_transport.h"

using namespace tfring;
using namespace tfring_test;

namespace {

// Each rank's links (its link to the right, its link from the left), with host_id hostIds[r].
std::vector<std::pair<LinkKind, LinkKind>> linksWith(const std::vector<std::string>& hostIds) {
  const int size = static_cast<int>(hostIds.size());
  auto store = std::make_shared<HashStore>();
  const std::string job = uniqueJob();
  std::vector<std::pair<LinkKind, LinkKind>> links(size);
  spawn(size, [&](int r) {
    Config c = rankConfig(r, size, {"auto", true, "auto"}, job);
    c.hostId = hostIds[r];
    PrefixStore ps(job, store);
    auto t = connectRing(c, ps);
    auto* ring = dynamic_cast<RingTransport*>(t.get());
    CHECK(ring != nullptr);
    links[r] = {ring->toRight().kind(), ring->fromLeft().kind()};
    storeBarrier(ps, "test-end", r, size, Deadline::after(30));
  });
  return links;
}

bool startsWith(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

}  // namespace

TEST(host_identity_is_hostname_boot_id_and_network_namespace) {
  const HostFacts here = detectHostFacts();
  CHECK(!here.hostName.empty());
  CHECK_EQ(here.bootId.size(), size_t{36});  // a UUID
  CHECK(startsWith(here.netNamespace, "net:["));
  CHECK_EQ(hostIdentity(here), here.hostName + "/" + here.bootId + "/" + here.netNamespace);
  CHECK_EQ(localHostIdentity(""), hostIdentity(here));
}

TEST(host_identity_tells_network_namespaces_apart) {
  // One machine, one boot, two network namespaces (`ip netns`, containers): two hosts.
  const HostFacts a{"node7", "0b4c6a1e-1111-2222-3333-444455556666", "net:[4026531833]"};
  HostFacts b = a;
  b.netNamespace = "net:[4026532290]";
  CHECK(hostIdentity(a) != hostIdentity(b));
  CHECK_EQ(hostIdentity(a), hostIdentity(HostFacts(a)));
  HostFacts rebooted = a;
  rebooted.bootId = "9f8e7d6c-1111-2222-3333-444455556666";
  CHECK(hostIdentity(a) != hostIdentity(rebooted));
}

TEST(host_id_replaces_detection) {
  CHECK_EQ(localHostIdentity("rack4-node7"), std::string("rack4-node7"));
  CHECK(localHostIdentity("rack4-node7") != localHostIdentity(""));
}

TEST(host_id_decides_which_thread_ranks_share_memory) {
  const LinkKind kShm = LinkKind::kShm, kTcp = LinkKind::kTcp;
  // Detected: every thread-rank is on this machine, so shared memory on every link.
  for (const auto& l : linksWith({"", ""})) CHECK(l.first == kShm && l.second == kShm);
  // The same id given on every rank: one host still.
  for (const auto& l : linksWith({"n1", "n1"})) CHECK(l.first == kShm && l.second == kShm);
  // Different ids (or an id against detection): two hosts on one machine, TCP between them.
  for (const auto& l : linksWith({"n1", "n2"})) CHECK(l.first == kTcp && l.second == kTcp);
  for (const auto& l : linksWith({"", "n2"})) CHECK(l.first == kTcp && l.second == kTcp);
  // Per link with mixed_ring: n1 n1 n2 -> 0->1 shm, 1->2 and 2->0 TCP.
  auto links = linksWith({"n1", "n1", "n2"});
  CHECK(links[0].first == kShm && links[1].first == kTcp && links[2].first == kTcp);
}

TEST(host_id_names_the_hosts_when_shm_cannot_span_them) {
  auto store = std::make_shared<HashStore>();
  const std::string job = uniqueJob();
  std::vector<std::string> errors(2);
  spawn(2, [&](int r) {
    Config c = rankConfig(r, 2, {"shm", true, "shm"}, job);
    c.hostId = r == 0 ? "n1" : "n2";
    c.rendezvousTimeout = 10;
    PrefixStore ps(job, store);
    try {
      connectRing(c, ps);
    } catch (const Error& e) {
      errors[r] = e.what();
    }
  });
  for (const auto& e : errors) CHECK(e.find("several hosts (rank 0 on n1, rank 1 on n2)") != std::string::npos);
}
