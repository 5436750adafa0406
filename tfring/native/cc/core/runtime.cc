#include "runtime.h"

#include "rendezvous/bootstrap.h"

namespace tfring {
namespace {
std::mutex gMu;

// Ranks reach the store at storeHost: loopback there means nobody outside this host needs it.
std::string storeListenHost(const Config& c) {
  const bool loopback = c.storeHost == "localhost" || c.storeHost.rfind("127.", 0) == 0;
  return loopback ? "127.0.0.1" : "0.0.0.0";
}

std::shared_ptr<Runtime> gRuntime;

TcpStoreServer::Limits storeLimits(const Config& c) {
  TcpStoreServer::Limits limits;
  limits.authTimeout = c.storeAuthTimeout;
  limits.frameTimeout = c.storeFrameTimeout;
  return limits;
}

}  // namespace

Runtime::Runtime(const Config& config) : config_(config) {
  // Python validates the record; this guard only keeps a bad direct caller from indexing the ring
  // out of bounds.
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size) {
    throw Error(Code::kInvalidArgument, "config: rank " + std::to_string(config.rank) + " is outside [0, " +
                                            std::to_string(config.size) + ")");
  }
  Rings rings;
  if (config.size > 1) {
    if (config.rank == 0) {
      server_ = std::make_unique<TcpStoreServer>(storeListenHost(config), config.storePort, config.secret,
                                                 storeLimits(config));
    }
    auto client = std::make_shared<TcpStore>(config.storeHost, config.storePort, config.secret,
                                             config.storeRequestTimeout, Deadline::after(config.rendezvousTimeout));
    store_ = std::make_shared<PrefixStore>(config.jobId, client);
    rings = connectRings(config, *store_);
  }
  engine_ = std::make_shared<Engine>(config, std::move(rings), store_);
  sets_ = std::make_unique<ProcessSets>(config, engine_, store_);
}

void Runtime::init(const Config& config) {
  std::lock_guard<std::mutex> lock(gMu);
  if (gRuntime) {
    const Config& c = gRuntime->config();
    if (c.rank == config.rank && c.size == config.size) return;
    throw Error(Code::kFailedPrecondition, "tfring is already initialised as " + c.describe() +
                                               "; call tfring.shutdown() before init() with another job");
  }
  gRuntime = std::make_shared<Runtime>(config);
}

void Runtime::shutdown() {
  std::shared_ptr<Runtime> r;
  {
    std::lock_guard<std::mutex> lock(gMu);
    r.swap(gRuntime);
  }
  // Destroyed here, outside the lock; kernels still holding a reference keep it alive until done.
}

std::shared_ptr<Runtime> Runtime::current() {
  std::lock_guard<std::mutex> lock(gMu);
  return gRuntime;
}

}  // namespace tfring
