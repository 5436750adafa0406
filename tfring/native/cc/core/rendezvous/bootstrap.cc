#include "rendezvous/bootstrap.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <sstream>
#include <vector>

#include "transport/ring_links.h"
#include "transport/shm_transport.h"
#include "transport/socket.h"
#include "transport/tcp_transport.h"

namespace tfring {
namespace {

struct Endpoint {
  std::string host;
  int port = 0;
  std::string machine;  // hostname + boot id
  int pid = 0;
};

Endpoint parseEndpoint(const std::string& s) {
  std::istringstream in(s);
  Endpoint e;
  in >> e.host >> e.port >> e.machine >> e.pid;
  return e;
}

constexpr double kReportEverySeconds = 10.0;
// Bumped whenever the bytes on the wire change meaning: ranks of different builds refuse to mix.
constexpr int kProtocolVersion = 2;

std::string rankList(const std::vector<int>& ranks) {
  std::string who = ranks.size() > 1 ? "ranks " : "rank ";
  for (size_t i = 0; i < ranks.size(); ++i) who += (i ? ", " : "") + std::to_string(ranks[i]);
  return who;
}

std::string joinWaitError(const std::string& what, const std::vector<int>& ranks, const Config& c, int seconds) {
  const bool many = ranks.size() > 1;
  std::string where = c.storePort ? " or cannot reach the store at " + c.storeHost + ":" + std::to_string(c.storePort) : "";
  return "rendezvous: no word from " + rankList(ranks) + " within " + std::to_string(seconds) + " s, waiting for " +
         (many ? "them" : "it") + " to " + what + " (" + (many ? "they" : "it") + " never started, crashed" + where +
         "; TFRING_RENDEZVOUS_TIMEOUT sets the limit)";
}

// The value every rank put under key(r). While some are missing, prints every 10 s which ones:
// under mpirun or srun nothing else would tell why the job does not start.
std::vector<std::string> gatherFromRanks(Store& store, const Config& c, const std::string& what,
                                         const std::function<std::string(int)>& key, Deadline deadline) {
  std::vector<std::string> values(c.size);
  std::vector<int> missing;
  for (int r = 0; r < c.size; ++r) missing.push_back(r);
  const auto start = Clock::now();
  auto nextReport = Deadline::after(kReportEverySeconds);
  while (!missing.empty()) {
    const int r = missing.front();
    const Deadline slice = nextReport.time() < deadline.time() ? nextReport : deadline;
    try {
      values[r] = store.get(key(r), slice);
      missing.erase(missing.begin());
      continue;
    } catch (const Error& e) {
      if (e.code() != Code::kDeadlineExceeded) throw;
    }
    std::vector<int> still;
    for (int m : missing) {
      if (!store.tryGet(key(m), &values[m])) still.push_back(m);
    }
    missing.swap(still);
    if (missing.empty()) break;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (deadline.expired()) {
      throw Error(Code::kDeadlineExceeded, joinWaitError(what, missing, c, static_cast<int>(std::lround(waited))));
    }
    std::fprintf(stderr, "tfring: rank %d is waiting for %s to %s (%ld s of %ld s)\n", c.rank,
                 rankList(missing).c_str(), what.c_str(), std::lround(waited),
                 std::lround(waited + deadline.remainingMs() / 1000.0));
    nextReport = Deadline::after(kReportEverySeconds);
  }
  return values;
}

// The settings that decide how a collective is cut into messages: ranks must agree on every one.
std::string wireSettings(const Config& c) {
  std::ostringstream s;
  s << "protocol=" << kProtocolVersion << "\ntransport=" << c.transport << "\nsingle_copy=" << c.singleCopy
    << "\nfusion_threshold_bytes=" << c.fusionThresholdBytes << "\n";
  return s.str();
}

void agreeOnSettings(Store& store, const Config& c, Deadline deadline) {
  store.set("settings/" + std::to_string(c.rank), wireSettings(c));
  auto all = gatherFromRanks(store, c, "join", [](int r) { return "settings/" + std::to_string(r); }, deadline);
  for (int r = 1; r < c.size; ++r) {
    std::istringstream mine(all[0]), theirs(all[r]);
    std::string a, b;
    while (std::getline(mine, a) && std::getline(theirs, b)) {
      if (a == b) continue;
      throw Error(Code::kInvalidArgument,
                  "rendezvous: rank " + std::to_string(r) + " runs with " + b + " but rank 0 with " + a +
                      ": every rank must use the same value (pass the same TFRING_* variables and tfring "
                      "arguments to every rank, e.g. mpirun -x TFRING_FUSION_THRESHOLD)");
    }
  }
}

// One host (the launcher says every rank is local): listen on loopback only.
std::string listenHost(const Config& c) {
  if (c.localSize == c.size) return "127.0.0.1";
  return c.advertiseHost.empty() ? defaultHostAddress() : c.advertiseHost;
}

}  // namespace

void storeBarrier(Store& store, const std::string& name, int rank, int size, Deadline deadline) {
  store.set("barrier/" + name + "/" + std::to_string(rank), "1");
  Config c;
  c.rank = rank;
  c.size = size;
  gatherFromRanks(store, c, "reach '" + name + "'",
                  [&](int r) { return "barrier/" + name + "/" + std::to_string(r); }, deadline);
}

std::unique_ptr<Transport> connectRing(const Config& c, Store& store) {
  if (c.size == 1) return nullptr;
  const Deadline deadline = Deadline::after(c.rendezvousTimeout);
  const int left = (c.rank + c.size - 1) % c.size;
  const int right = (c.rank + 1) % c.size;

  const std::string host = listenHost(c);
  Socket listener = Socket::listen(host, 0);
  const std::string machine = hostName() + "/" + bootId();
  store.set("addr/" + std::to_string(c.rank), host + " " + std::to_string(listener.port()) + " " +
                                                   machine + " " + std::to_string(getpid()));
  agreeOnSettings(store, c, deadline);

  std::vector<Endpoint> all(c.size);
  bool oneHost = true;
  auto addrs = gatherFromRanks(store, c, "publish its address",
                               [](int r) { return "addr/" + std::to_string(r); }, deadline);
  for (int r = 0; r < c.size; ++r) {
    all[r] = parseEndpoint(addrs[r]);
    oneHost = oneHost && all[r].machine == machine;
  }

  Socket toRight, fromLeft;
  try {
    RingLinks links = linkNeighbours(c, listener, all[right].host, all[right].port, deadline);
    toRight = std::move(links.toRight);
    fromLeft = std::move(links.fromLeft);
  } catch (const Error& e) {
    throw Error(Code::kDeadlineExceeded, "rendezvous: could not link rank " + std::to_string(c.rank) +
                                             " with its ring neighbours within " +
                                             std::to_string(static_cast<int>(c.rendezvousTimeout)) + " s: " + e.what());
  }

  const bool useShm = c.transport == "shm" || (c.transport == "auto" && oneHost);
  if (useShm && !oneHost) {
    throw Error(Code::kInvalidArgument,
                "transport 'shm' was requested but the ranks run on several hosts; use 'auto' or 'tcp'");
  }
  if (!useShm) {
    storeBarrier(store, "tcp-ready", c.rank, c.size, deadline);
    return std::make_unique<TcpTransport>(c.rank, left, right, std::move(toRight), std::move(fromLeft));
  }

  const std::string prefix = "/tfring-" + c.jobId + "-";
  auto mine = ShmSegment::create(prefix + std::to_string(c.rank));
  store.set("shm/" + std::to_string(c.rank),
            std::to_string(reinterpret_cast<uintptr_t>(mine->probeAddress())));
  std::string leftProbe = store.get("shm/" + std::to_string(left), deadline);
  store.get("shm/" + std::to_string(right), deadline);
  auto leftSeg = ShmSegment::open(prefix + std::to_string(left));
  auto rightSeg = ShmSegment::open(prefix + std::to_string(right));
#ifdef PR_SET_PTRACER
  // Under Yama ptrace_scope=1 a process may only read a sibling's memory if the sibling allows it:
  // our right neighbour is the one that reads our buffers.
  if (c.singleCopy) prctl(PR_SET_PTRACER, static_cast<unsigned long>(all[right].pid), 0, 0, 0);
#endif
  storeBarrier(store, "shm-mapped", c.rank, c.size, deadline);
  mine->unlink();  // everyone has it mapped: nothing can leak in /dev/shm from here on
  auto t = std::make_unique<ShmTransport>(c.rank, left, right, std::move(mine), std::move(leftSeg),
                                          std::move(rightSeg), all[left].pid, std::move(toRight),
                                          std::move(fromLeft));
  if (c.singleCopy) {
    t->probeSingleCopy(reinterpret_cast<const uint64_t*>(std::stoull(leftProbe)));
  } else {
    t->probeSingleCopy(nullptr);
  }
  storeBarrier(store, "shm-probed", c.rank, c.size, deadline);
  return t;
}

}  // namespace tfring
