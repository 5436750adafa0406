// The configuration the C++ tests run with. C++ holds no defaults (tfring/config.py is the one
// place that knows them), so the values the tests need are spelled out here, once: those of a
// job on one machine with tfring's defaults, except shorter timeouts.
#pragma once

#include <string>

#include "config.h"
#include "rendezvous/tcp_store_server.h"

namespace tfring_test {

constexpr double kStoreRequestTimeout = 60;

inline tfring::TcpStoreServerLimits storeLimits() {
  tfring::TcpStoreServerLimits limits;
  limits.authTimeout = 10;
  limits.frameTimeout = 30;
  return limits;
}

inline tfring::Config testConfig(int rank, int size, const std::string& job) {
  tfring::Config c;
  c.rank = rank;
  c.size = size;
  c.localRank = 0;
  c.localSize = 1;  // not every rank local: ranks listen on a non-loopback address, as across hosts
  c.storeHost = "127.0.0.1";
  c.storePort = 0;
  c.secret = "test-secret";
  c.jobId = job;
  c.advertiseHost = "";
  c.rendezvousTimeout = 30;
  c.collectiveTimeout = 30;
  c.transport = "auto";
  c.singleCopy = true;
  c.fusionThresholdBytes = size_t{64} << 20;
  c.storeRequestTimeout = kStoreRequestTimeout;
  const tfring::TcpStoreServerLimits limits = storeLimits();
  c.storeAuthTimeout = limits.authTimeout;
  c.storeFrameTimeout = limits.frameTimeout;
  c.mixedRing = true;  // Python's default
  c.allreduceAlgorithm = "auto";
  c.hostId = "";       // detected: every thread-rank on this machine
  return c;
}

}  // namespace tfring_test
