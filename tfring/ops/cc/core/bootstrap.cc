#include "bootstrap.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include "hmac.h"
#include "shm_transport.h"
#include "socket.h"
#include "tcp_transport.h"

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

Digest handshakeMac(const Config& c, int fromRank) {
  std::string msg = "tfring-data|" + c.jobId + "|" + std::to_string(fromRank);
  return hmacSha256(c.secret, msg.data(), msg.size());
}

std::string joinWaitError(const std::string& what, int rank, const Config& c, const Error& e) {
  return "rendezvous: " + what + " rank " + std::to_string(rank) + " within " +
         std::to_string(static_cast<int>(c.rendezvousTimeout)) +
         " s (it never started, crashed, or cannot reach the store at " + c.storeHost + ":" +
         std::to_string(c.storePort) + "): " + e.what();
}

Endpoint lookup(Store& store, const Config& c, int rank, Deadline d) {
  try {
    return parseEndpoint(store.get("addr/" + std::to_string(rank), d));
  } catch (const Error& e) {
    throw Error(Code::kDeadlineExceeded, joinWaitError("no word from", rank, c, e));
  }
}

}  // namespace

void storeBarrier(Store& store, const std::string& name, int rank, int size, Deadline deadline) {
  store.set("barrier/" + name + "/" + std::to_string(rank), "1");
  for (int r = 0; r < size; ++r) {
    try {
      store.get("barrier/" + name + "/" + std::to_string(r), deadline);
    } catch (const Error& e) {
      throw Error(Code::kDeadlineExceeded,
                  "rendezvous: rank " + std::to_string(r) + " did not reach '" + name + "' in time");
    }
  }
}

std::unique_ptr<Transport> connectRing(const Config& c, Store& store) {
  if (c.size == 1) return nullptr;
  const Deadline deadline = Deadline::after(c.rendezvousTimeout);
  const int left = (c.rank + c.size - 1) % c.size;
  const int right = (c.rank + 1) % c.size;

  Socket listener = Socket::listen("0.0.0.0", 0);
  const std::string host = c.advertiseHost.empty() ? defaultHostAddress() : c.advertiseHost;
  const std::string machine = hostName() + "/" + bootId();
  store.set("addr/" + std::to_string(c.rank), host + " " + std::to_string(listener.port()) + " " +
                                                   machine + " " + std::to_string(getpid()));

  std::vector<Endpoint> all(c.size);
  bool oneHost = true;
  for (int r = 0; r < c.size; ++r) {
    all[r] = lookup(store, c, r, deadline);
    oneHost = oneHost && all[r].machine == machine;
  }

  // Connect right, then accept left (the listener queues the connection meanwhile).
  Socket toRight;
  try {
    toRight = Socket::connect(all[right].host, all[right].port, deadline);
  } catch (const Error& e) {
    throw Error(Code::kDeadlineExceeded, joinWaitError("could not connect to", right, c, e));
  }
  {
    uint32_t me = static_cast<uint32_t>(c.rank);
    Digest mac = handshakeMac(c, c.rank);
    toRight.sendAll(&me, sizeof(me), deadline);
    toRight.sendAll(mac.data(), mac.size(), deadline);
  }
  Socket fromLeft;
  while (!fromLeft.valid()) {
    Socket s;
    try {
      s = listener.accept(deadline);
    } catch (const Error& e) {
      throw Error(Code::kDeadlineExceeded, joinWaitError("no connection from", left, c, e));
    }
    uint32_t who = 0;
    Digest mac{};
    try {
      s.recvAll(&who, sizeof(who), Deadline::after(10));
      s.recvAll(mac.data(), mac.size(), Deadline::after(10));
    } catch (const Error&) {
      continue;  // not one of ours
    }
    if (static_cast<int>(who) == left && digestEqual(mac, handshakeMac(c, left))) {
      fromLeft = std::move(s);
    } else {
      std::fprintf(stderr, "tfring: rank %d refused a data connection that did not carry the job secret\n",
                   c.rank);
    }
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
