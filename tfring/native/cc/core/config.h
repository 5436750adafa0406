// The runtime's configuration. Python builds it once (arguments first, environment second; the
// README has the one table of variables) and hands it over as "key=value" lines; the C++ side
// never reads the environment.
#pragma once

#include <cstddef>
#include <string>

namespace tfring {

struct Config {
  int rank = 0;
  int size = 1;
  int localRank = 0;
  int localSize = 1;
  std::string storeHost = "127.0.0.1";
  int storePort = 0;          // rank 0 serves the store here (0 with size > 1: invalid)
  std::string secret;         // job secret for the store's HMAC
  std::string jobId = "tfring";
  std::string advertiseHost;  // address other ranks use to reach us ("" -> auto)
  double rendezvousTimeout = 120.0;
  double collectiveTimeout = 60.0;
  std::string transport = "auto";  // auto | shm | tcp
  bool singleCopy = true;          // shm: let neighbours read our buffers with process_vm_readv
  size_t fusionThresholdBytes = size_t{64} << 20;

  // Parses "key=value" lines; throws Error(kInvalidArgument) naming an unknown key or a bad value.
  static Config parse(const std::string& text);
  std::string describe() const;
};

}  // namespace tfring
