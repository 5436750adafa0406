// Thread-ranks for the algorithm and engine tests: P threads in one process, each with its own
// Transport built by the real bootstrap over an in-memory store (Gloo's base_test spawn()).
#pragma once

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <memory>

#include "algorithms/reduce.h"
#include "engine/engine.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/rank_gather.h"
#include "rendezvous/store.h"
#include "tests/test_config.h"
#include "tests/test_framework.h"

namespace tfring_test {

struct Mode {
  const char* transport;
  bool singleCopy;
  const char* label;
  // > 0: rank r runs on "host" r / ranksPerHost, so that links between hosts are TCP and the
  // others shared memory (transport=auto); 0: every rank on this machine.
  int ranksPerHost = 0;
  bool mixedRing = true;  // mixed_ring, tfring's default (false: auto across hosts is TCP everywhere)
};

// The last mode mixes link kinds in one ring once it has 3 ranks or more (2: both on one host).
inline std::vector<Mode> allModes() {
  return {{"tcp", false, "tcp"},
          {"shm", true, "shm-single-copy"},
          {"shm", false, "shm-eager"},
          {"auto", true, "shm-and-tcp", 2}};
}

inline tfring::Config rankConfig(int rank, int size, const Mode& m, const std::string& job) {
  tfring::Config c = testConfig(rank, size, job);
  c.transport = m.transport;
  c.singleCopy = m.singleCopy;
  c.mixedRing = m.mixedRing;
  // The host as the setting host_id (TFRING_HOST_ID) names it; "" leaves it to detection.
  c.hostId = m.ranksPerHost > 0 ? "host" + std::to_string(rank / m.ranksPerHost) : "";
  return c;
}

inline std::string uniqueJob() {
  static std::atomic<int> counter{0};
  return "t" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

// Runs fn(rank, transport, config) on `size` thread-ranks connected in a ring.
inline void withRing(int size, const Mode& m,
                     const std::function<void(int, tfring::Transport*, const tfring::Config&)>& fn) {
  auto store = std::make_shared<tfring::HashStore>();
  std::string job = uniqueJob();
  spawn(size, [&](int r) {
    tfring::Config c = rankConfig(r, size, m, job);
    tfring::PrefixStore ps(job, store);
    auto t = tfring::connectRing(c, ps);
    fn(r, t.get(), c);
    // Keep every transport alive until all ranks are done with their last step.
    tfring::storeBarrier(ps, "test-end", r, size, tfring::Deadline::after(30));
  });
}

// An in-place allreduce of float tensors named "grads".
inline tfring::Request allreduceOf(std::vector<std::vector<float>>& tensors,
                                   tfring::ReduceOp op = tfring::ReduceOp::kSum) {
  tfring::Request r;
  r.kind = tfring::OpKind::kAllreduce;
  r.name = "grads";
  r.op = op;
  for (auto& t : tensors) {
    r.tensors.push_back({t.data(), t.data(), t.size() * 4, {static_cast<int64_t>(t.size())}});
  }
  return r;
}

// Runs one request on `e` and waits for its status.
inline tfring::Status call(tfring::Engine& e, tfring::Request r) {
  std::promise<tfring::Status> p;
  auto f = p.get_future();
  r.done = [&p](const tfring::Status& s) { p.set_value(s); };
  e.enqueue(std::move(r));
  return f.get();
}

inline void setElem(void* p, size_t i, tfring::DataType t, double v) {
  using tfring::DataType;
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(p)[i] = v; break;
    case DataType::kInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DataType::kUint8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DataType::kFloat16: static_cast<uint16_t*>(p)[i] = tfring::floatToHalf(static_cast<float>(v)); break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = tfring::floatToBfloat16(static_cast<float>(v));
      break;
  }
}

inline double getElem(const void* p, size_t i, tfring::DataType t) {
  using tfring::DataType;
  switch (t) {
    case DataType::kFloat32: return static_cast<const float*>(p)[i];
    case DataType::kFloat64: return static_cast<const double*>(p)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(p)[i];
    case DataType::kInt64: return static_cast<const int64_t*>(p)[i];
    case DataType::kUint8: return static_cast<const uint8_t*>(p)[i];
    case DataType::kFloat16: return tfring::halfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16: return tfring::bfloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
  }
  return 0;
}

// Small integers so every dtype represents inputs and sums exactly.
inline double inputValue(int rank, size_t i, tfring::ReduceOp op) {
  if (op == tfring::ReduceOp::kProduct) {
    int k = static_cast<int>((i + rank) % 3);
    return k == 2 ? 2 : (k == 1 ? -1 : 1);
  }
  return static_cast<double>(static_cast<int>(((rank + 1) * (i % 13)) % 17) - 8);
}

inline double expectedValue(int size, size_t i, tfring::ReduceOp op, tfring::DataType t) {
  using tfring::ReduceOp;
  double acc = inputValue(0, i, op);
  for (int r = 1; r < size; ++r) {
    double v = inputValue(r, i, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean: acc += v; break;
      case ReduceOp::kProduct: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  if (op == ReduceOp::kMean) {
    bool integer = t == tfring::DataType::kInt32 || t == tfring::DataType::kInt64;
    acc = integer ? std::trunc(acc / size) : acc / size;
  }
  return acc;
}

inline double tolerance(tfring::DataType t) {
  if (t == tfring::DataType::kFloat16) return 1e-2;
  if (t == tfring::DataType::kBFloat16) return 5e-2;
  if (t == tfring::DataType::kFloat32) return 1e-6;
  return 1e-12;
}

inline const tfring::DataType kTypes[] = {tfring::DataType::kFloat16, tfring::DataType::kBFloat16,
                                          tfring::DataType::kFloat32, tfring::DataType::kFloat64,
                                          tfring::DataType::kInt32,   tfring::DataType::kInt64};
inline const tfring::ReduceOp kOps[] = {tfring::ReduceOp::kSum, tfring::ReduceOp::kMean, tfring::ReduceOp::kMin,
                                        tfring::ReduceOp::kMax, tfring::ReduceOp::kProduct};

// The element that differs from the expected value, or "" when all match.
inline std::string mismatch(const std::vector<uint8_t>& got, int size, size_t count, tfring::DataType type,
                            tfring::ReduceOp op) {
  for (size_t i = 0; i < count; ++i) {
    const double g = getElem(got.data(), i, type), want = expectedValue(size, i, op, type);
    if (std::fabs(g - want) > tolerance(type) * std::max(1.0, std::fabs(want))) {
      return std::string(tfring::dataTypeName(type)) + " " + tfring::reduceOpName(op) + " count " +
             std::to_string(count) + " index " + std::to_string(i) + ": got " + std::to_string(g) + " want " +
             std::to_string(want);
    }
  }
  return "";
}

}  // namespace tfring_test
