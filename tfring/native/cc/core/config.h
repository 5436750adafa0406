// The runtime's configuration, as a complete record. Python is the one place that knows the
// settings' names, defaults, environment variables and checks (tfring/config.py); it hands C++
// every key, one "key=value" per line. C++ only parses: it holds no defaults and checks no ranges,
// so a setting cannot mean one thing in Python and another here.
#pragma once

#include <cstddef>
#include <string>

namespace tfring {

struct Config {
  int rank = 0;                     // rank
  int size = 0;                     // size
  int localRank = 0;                // local_rank
  int localSize = 0;                // local_size
  std::string storeHost;            // store_host: where rank 0 serves the rendezvous store
  int storePort = 0;                // store_port
  std::string secret;               // secret: the job secret for every HMAC
  std::string jobId;                // job_id
  std::string advertiseHost;        // advertise_host: how other hosts reach us ("" -> auto)
  double rendezvousTimeout = 0;     // rendezvous_timeout, seconds for all ranks to join
  double collectiveTimeout = 0;     // timeout, seconds a collective may stall
  std::string transport;            // transport: auto | shm | tcp
  bool singleCopy = false;          // single_copy: shm reads neighbours' buffers with process_vm_readv
  size_t fusionThresholdBytes = 0;  // fusion_threshold_bytes
  double storeRequestTimeout = 0;   // store_request_timeout: seconds per request to the store
  double storeAuthTimeout = 0;      // store_auth_timeout: seconds a store client has to authenticate
  double storeFrameTimeout = 0;     // store_frame_timeout: seconds to finish a store frame once begun
  bool mixedRing = true;            // mixed_ring: transport=auto may mix shm and TCP links across hosts
  std::string hostId;               // host_id: this rank's host identity ("" -> detected)
  std::string allreduceAlgorithm;   // allreduce_algorithm: auto | ring | hierarchical
  std::string timeline;             // timeline: a Chrome-trace file of this rank's collectives ("" -> none)
  double stallWarning = 0;          // stall_warning: seconds before a waiting collective says who is missing (0: never)

  // Parses the record; throws Error(kInvalidArgument) naming a missing, unknown or repeated key, or
  // a value that is not of its key's type.
  static Config parse(const std::string& text);
  std::string describe() const;
};

}  // namespace tfring
