#include "rendezvous/bootstrap.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "rendezvous/rank_gather.h"
#include "transport/host_identity.h"
#include "transport/host_layout.h"
#include "transport/link_choice.h"
#include "transport/ring_links.h"
#include "transport/ring_transport.h"
#include "transport/shm_transport.h"
#include "transport/socket.h"
#include "transport/tcp_transport.h"

namespace tfring {
namespace {

// Bumped whenever the bytes on the wire change meaning: ranks of different builds refuse to mix.
constexpr int kProtocolVersion = 4;

struct Neighbours {
  int left, right;
  explicit Neighbours(const Config& c) : left((c.rank + c.size - 1) % c.size), right((c.rank + 1) % c.size) {}
};

// The settings that decide how a collective is cut into messages: ranks must agree on every one.
std::string wireSettings(const Config& c) {
  std::ostringstream s;
  s << "protocol=" << kProtocolVersion << "\ntransport=" << c.transport << "\nsingle_copy=" << c.singleCopy
    << "\nfusion_threshold_bytes=" << c.fusionThresholdBytes << "\nmixed_ring=" << c.mixedRing
    << "\nallreduce_algorithm=" << c.allreduceAlgorithm << "\n";
  return s.str();
}

// The first setting in which a rank differs from rank 0, worded for every rank alike; "" if none.
std::string settingsMismatch(const std::vector<std::string>& all) {
  for (size_t r = 1; r < all.size(); ++r) {
    std::istringstream mine(all[0]), theirs(all[r]);
    std::string a, b;
    while (std::getline(mine, a) && std::getline(theirs, b)) {
      if (a == b) continue;
      return "rendezvous: rank " + std::to_string(r) + " runs with " + b + " but rank 0 with " + a +
             ": every rank must use the same value (pass the same TFRING_* variables and tfring arguments to "
             "every rank, e.g. mpirun -x TFRING_FUSION_THRESHOLD)";
    }
  }
  return "";
}

// How long rank 0 holds its error back for the others to read the settings (see below).
constexpr double kMismatchGraceSeconds = 10;

// Rank 0's process serves the store and exits once its error is out: had it thrown at once, a
// rank still reading the settings would only learn that the store closed. So every rank marks
// that it has read them, and rank 0 waits for the marks (bounded: a rank that died meanwhile
// must not keep the error from the user). Only on a mismatch: agreeing ranks never wait here.
void holdStoreUntilSettingsRead(Store& store, const Config& c, Deadline deadline) {
  auto key = [](int r) { return "settings-read/" + std::to_string(r); };
  try {
    store.set(key(c.rank), "1");
    if (c.rank != 0) return;
    const Deadline grace = Deadline::after(kMismatchGraceSeconds);
    gatherFromRanks(store, c, "read the settings", key, grace.time() < deadline.time() ? grace : deadline);
  } catch (const Error&) {
    // The store or a rank went away: the mismatch, which the caller throws, is still the cause.
  }
}

void agreeOnSettings(Store& store, const Config& c, Deadline deadline) {
  store.set("settings/" + std::to_string(c.rank), wireSettings(c));
  auto all = gatherFromRanks(store, c, "join", [](int r) { return "settings/" + std::to_string(r); }, deadline);
  // Every rank has the same settings in hand, so every rank finds (and throws) the same mismatch.
  const std::string mismatch = settingsMismatch(all);
  if (mismatch.empty()) return;
  holdStoreUntilSettingsRead(store, c, deadline);
  throw Error(Code::kInvalidArgument, mismatch);
}

// One host (the launcher says every rank is local): listen on loopback only.
std::string listenHost(const Config& c) {
  if (c.localSize == c.size) return "127.0.0.1";
  return c.advertiseHost.empty() ? defaultHostAddress() : c.advertiseHost;
}

void publishEndpoint(Store& store, const Config& c, const Endpoint& e) {
  store.set("addr/" + std::to_string(c.rank),
            e.host + " " + std::to_string(e.port) + " " + e.machine + " " + std::to_string(e.pid));
}

std::vector<Endpoint> gatherEndpoints(Store& store, const Config& c, Deadline deadline) {
  auto addrs = gatherFromRanks(store, c, "publish its address", [](int r) { return "addr/" + std::to_string(r); },
                               deadline);
  std::vector<Endpoint> ring(c.size);
  for (int r = 0; r < c.size; ++r) {
    std::istringstream in(addrs[r]);
    in >> ring[r].host >> ring[r].port >> ring[r].machine >> ring[r].pid;
  }
  return ring;
}

RingLinks linkSockets(const Config& c, const Socket& listener, const Endpoint& right, Deadline deadline) {
  try {
    return linkNeighbours(c, listener, right.host, right.port, deadline);
  } catch (const Error& e) {
    throw Error(Code::kDeadlineExceeded, "rendezvous: could not link rank " + std::to_string(c.rank) +
                                             " with its ring neighbours within " +
                                             std::to_string(static_cast<int>(c.rendezvousTimeout)) + " s: " + e.what());
  }
}

// This rank's segment and those of its shared-memory neighbours (null where a link is TCP).
struct ShmSegments {
  std::shared_ptr<ShmSegment> mine;
  std::unique_ptr<ShmSegment> left, right;
  const uint64_t* leftProbe = nullptr;  // the left neighbour's probe word, in its address space
};

std::string segmentName(const Config& c, int rank) { return "/tfring-" + c.jobId + "-" + std::to_string(rank); }

// Creates our segment when a link of ours is shared memory, and maps the neighbours' across such
// links. Every rank takes part in the barrier, with or without a segment.
ShmSegments mapSegments(const Config& c, Store& store, const std::vector<LinkKind>& plan,
                        const std::vector<Endpoint>& ring, Deadline deadline) {
  const Neighbours n(c);
  const bool shmLeft = plan[n.left] == LinkKind::kShm, shmRight = plan[c.rank] == LinkKind::kShm;
  ShmSegments s;
  if (shmLeft || shmRight) {
    s.mine = ShmSegment::create(segmentName(c, c.rank));
    store.set("shm/" + std::to_string(c.rank), std::to_string(reinterpret_cast<uintptr_t>(s.mine->probeAddress())));
  }
  if (shmLeft) {
    s.leftProbe = reinterpret_cast<const uint64_t*>(std::stoull(store.get("shm/" + std::to_string(n.left), deadline)));
    s.left = ShmSegment::open(segmentName(c, n.left));
  }
  if (shmRight) {
    store.get("shm/" + std::to_string(n.right), deadline);  // it exists once this key does
    s.right = ShmSegment::open(segmentName(c, n.right));
#ifdef PR_SET_PTRACER
    // Under Yama ptrace_scope=1 a process may only read a sibling's memory if the sibling allows
    // it: our right neighbour is the one that reads our buffers.
    if (c.singleCopy) prctl(PR_SET_PTRACER, static_cast<unsigned long>(ring[n.right].pid), 0, 0, 0);
#endif
  }
  storeBarrier(store, "shm-mapped", c.rank, c.size, deadline);
  if (s.mine) s.mine->unlink();  // everyone has it mapped: nothing can leak in /dev/shm from here on
  return s;
}

std::unique_ptr<SendLink> sendLink(LinkKind kind, int right, ShmSegments& s, Socket sock) {
  if (kind == LinkKind::kTcp) return std::make_unique<TcpSendLink>(right, std::move(sock));
  return std::make_unique<ShmSendLink>(right, s.mine, std::move(s.right), std::move(sock));
}

std::unique_ptr<RecvLink> recvLink(const Config& c, LinkKind kind, int left, int leftPid, ShmSegments& s, Socket sock) {
  if (kind == LinkKind::kTcp) return std::make_unique<TcpRecvLink>(left, std::move(sock));
  auto link = std::make_unique<ShmRecvLink>(left, s.mine, std::move(s.left), leftPid, std::move(sock));
  link->probeSingleCopy(c.singleCopy ? s.leftProbe : nullptr);
  return link;
}

bool anyShm(const std::vector<LinkKind>& plan) {
  for (LinkKind k : plan) {
    if (k == LinkKind::kShm) return true;
  }
  return false;
}

// The links of this rank as the plan says, after the store barriers every rank passes alike.
// `members[i]` is the job rank at ring position i (c.rank and c.size are positions): links and
// errors name neighbours by their job rank.
std::unique_ptr<Transport> buildTransport(const Config& c, Store& store, const std::vector<Endpoint>& ring,
                                          const std::vector<int>& members, const std::vector<LinkKind>& plan,
                                          RingLinks sockets, Deadline deadline) {
  const Neighbours n(c);
  const bool shm = anyShm(plan);
  if (!shm) storeBarrier(store, "tcp-ready", c.rank, c.size, deadline);
  ShmSegments segments = shm ? mapSegments(c, store, plan, ring, deadline) : ShmSegments();
  auto toRight = sendLink(plan[c.rank], members[n.right], segments, std::move(sockets.toRight));
  auto fromLeft =
      recvLink(c, plan[n.left], members[n.left], ring[n.left].pid, segments, std::move(sockets.fromLeft));
  // The single-copy verdicts are in every segment before anyone reads its right neighbour's.
  if (shm) storeBarrier(store, "shm-probed", c.rank, c.size, deadline);
  return std::make_unique<RingTransport>(c.rank, members[n.left], members[n.right], std::move(toRight),
                                         std::move(fromLeft));
}

// The ring of `members` (job ranks, in ring order); `c` holds this rank's position and the ring's
// size as rank and size. `endpoints`, when given, receives what every member published.
std::unique_ptr<Transport> connectGroup(const Config& c, Store& store, const std::vector<int>& members,
                                        std::vector<Endpoint>* endpoints) {
  const Deadline deadline = Deadline::after(c.rendezvousTimeout);
  const std::string host = listenHost(c);
  Socket listener = Socket::listen(host, 0);
  publishEndpoint(store, c, {host, listener.port(), localHostIdentity(c.hostId), static_cast<int>(getpid())});
  agreeOnSettings(store, c, deadline);
  const std::vector<Endpoint> ring = gatherEndpoints(store, c, deadline);
  const std::vector<LinkKind> plan = planRing(c.transport, ring, c.mixedRing);
  RingLinks sockets = linkSockets(c, listener, ring[Neighbours(c).right], deadline);
  if (endpoints) *endpoints = ring;
  return buildTransport(c, store, ring, members, plan, std::move(sockets), deadline);
}

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : " ") + std::to_string(r);
  return s;
}

// A ring over some of the job's ranks, with its own keys in the store, its own data connections
// and shared-memory segments, listening where the world ring does (ranks that share a host id may
// still sit in different network namespaces). `transport` is the world ring's (ringTransport);
// `what` names the ring's use in errors.
std::unique_ptr<Transport> connectSubring(const Config& c, Store& store, const std::string& name,
                                          const std::vector<int>& members, const std::string& transport,
                                          const std::string& what) {
  Config sub = subringConfig(c, name, members);
  sub.transport = transport;
  PrefixStore prefixed(name, std::shared_ptr<Store>(&store, [](Store*) {}));
  try {
    return connectGroup(sub, prefixed, members, nullptr);
  } catch (const Error& e) {
    throw Error(e.code(), "linking the ring " + name + " of " + what + " (job ranks " + rankList(members) +
                              "; ranks below count positions in it): " + e.what());
  }
}

std::vector<int> allRanks(int size) {
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  return ranks;
}

HostLayout layoutOf(const std::vector<Endpoint>& ring) {
  std::vector<std::string> machines;
  for (const auto& e : ring) machines.push_back(e.machine);
  return hostLayout(machines);
}

// The ring inside this rank's host and the one across hosts, for the hierarchical allreduce.
void addHostRings(const Config& c, Store& store, const HostLayout& layout, const std::vector<Endpoint>& world,
                  Rings* rings) {
  // Hosts' ranks are contiguous, so a rank's right neighbour inside its host ring is the one of
  // the world ring wherever the world link is shared memory: the single reader that the one
  // PR_SET_PTRACER a process can name (mapSegments) lets read its buffers is the same in both.
  const int perHost = layout.perHost, host = c.rank / perHost, index = c.rank % perHost;
  std::vector<int> local, cross;
  for (int i = 0; i < perHost; ++i) local.push_back(host * perHost + i);
  for (int h = 0; h < layout.hosts; ++h) cross.push_back(h * perHost + index);
  const std::string transport = ringTransport(c.transport, world, c.mixedRing);
  const std::string what = "the hierarchical allreduce";
  rings->local = connectSubring(c, store, "host" + std::to_string(host), local, transport, what);
  rings->cross = connectSubring(c, store, "across" + std::to_string(index), cross, transport, what);
  rings->localSize = perHost;
  rings->hosts = layout.hosts;
}

}  // namespace

Config subringConfig(const Config& c, const std::string& name, const std::vector<int>& members) {
  Config sub = c;
  sub.rank = static_cast<int>(std::find(members.begin(), members.end(), c.rank) - members.begin());
  sub.size = static_cast<int>(members.size());
  sub.jobId = c.jobId + "." + name;
  sub.localSize = c.localSize == c.size ? sub.size : 1;
  return sub;
}

std::unique_ptr<Transport> connectProcessSet(const Config& c, Store& store, const std::string& name,
                                             const std::vector<int>& members) {
  Config sub = c;
  // A process may let only one other read its memory (mapSegments' PR_SET_PTRACER), and that is
  // its right neighbour in the world ring: a set's shared-memory links copy through the segment.
  sub.singleCopy = false;
  return connectSubring(sub, store, name, members, c.transport, "process set " + name);
}

std::unique_ptr<Transport> connectRing(const Config& c, Store& store) {
  if (c.size == 1) return nullptr;
  auto ring = connectGroup(c, store, allRanks(c.size), nullptr);
  leaveRendezvous(store, c, Deadline::after(c.rendezvousTimeout));
  return ring;
}

Rings connectRings(const Config& c, Store& store) {
  Rings rings;
  if (c.size == 1) return rings;
  std::vector<Endpoint> world;
  rings.world = connectGroup(c, store, allRanks(c.size), &world);
  const HostLayout layout = layoutOf(world);
  if (useHierarchical(c.allreduceAlgorithm, layout)) addHostRings(c, store, layout, world, &rings);
  leaveRendezvous(store, c, Deadline::after(c.rendezvousTimeout));
  return rings;
}

}  // namespace tfring
