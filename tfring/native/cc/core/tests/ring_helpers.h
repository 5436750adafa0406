// Thread-ranks for the algorithm and engine tests: P threads in one process, each with its own
// Transport built by the real bootstrap over an in-memory store (Gloo's base_test spawn()).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

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

// Runs fn(rank, engine) on `size` thread-ranks that each own an Engine; `tweak` adjusts each
// rank's config.
inline void withEngines(int size, const Mode& m, const std::function<void(tfring::Config&)>& tweak,
                        const std::function<void(int, tfring::Engine&)>& fn) {
  auto store = std::make_shared<tfring::HashStore>();
  std::string job = uniqueJob();
  spawn(size, [&](int r) {
    tfring::Config c = rankConfig(r, size, m, job);
    tweak(c);
    auto ps = std::make_shared<tfring::PrefixStore>(job, store);
    tfring::Engine e(c, tfring::connectRing(c, *ps), ps);
    fn(r, e);
    tfring::storeBarrier(*ps, "test-end", r, size, tfring::Deadline::after(30));
  });
}
inline void withEngines(int size, const Mode& m, const std::function<void(int, tfring::Engine&)>& fn) {
  withEngines(size, m, [](tfring::Config&) {}, fn);
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
      case ReduceOp::kAdasum: break;  // not elementwise: adasum_test.cc
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

// MEAN of 16-bit floats is rounded once: the last addition and the division happen in float32
// (reduce.h, reduceMeanInto). These per-rank inputs make a second rounding visible: every partial
// sum is exact in the type, the full sum is not, and rounding it before dividing moves the mean
// by one unit (float16 on 3 ranks: 286.875 / 3 = 95.625, but 287 / 3 gives 95.6875). With 2
// ranks the division is exact either way; they only check that nothing else changed. float32
// takes the bfloat16 inputs (integers), and its mean must stay the float32 sum / size.
inline std::vector<double> meanRoundingInputs(tfring::DataType type, int size) {
  const bool half = type == tfring::DataType::kFloat16;
  switch (size) {
    case 2: return half ? std::vector<double>{100.5, 185.375} : std::vector<double>{141, 214};
    case 3: return half ? std::vector<double>{100.5, 100.5, 85.875} : std::vector<double>{140, 214, 248};
    case 6:
      return half ? std::vector<double>{31.75, 38.75, 99.5, 81.25, 2.5, 2.625}
                  : std::vector<double>{144, 36, 56, 24, 18, 244};
  }
  throw Failure("no mean-rounding inputs for " + std::to_string(size) + " ranks");
}

// Element i of rank r's input: its value, negated on every third element (rounding to nearest
// even is symmetric, so the expected mean is negated too).
inline double meanRoundingInput(tfring::DataType type, int size, int rank, size_t i) {
  const double v = meanRoundingInputs(type, size)[rank];
  return i % 3 == 1 ? -v : v;
}

// The mean of element i rounded once: float32 sum (exact here), true division, one rounding.
inline double meanRoundedOnce(tfring::DataType type, int size, size_t i) {
  double sum = 0;
  for (double v : meanRoundingInputs(type, size)) sum += v;
  const float mean = static_cast<float>(sum) / static_cast<float>(size);
  std::vector<uint8_t> one(8);
  setElem(one.data(), 0, type, i % 3 == 1 ? -mean : mean);
  return getElem(one.data(), 0, type);
}

// The first element of `got` (count elements of `type`) that is not meanRoundedOnce, or "".
inline std::string meanRoundingMismatch(const uint8_t* got, size_t count, tfring::DataType type, int size) {
  for (size_t i = 0; i < count; ++i) {
    const double g = getElem(got, i, type), want = meanRoundedOnce(type, size, i);
    if (g != want) {
      return std::string(tfring::dataTypeName(type)) + " mean of " + std::to_string(size) + " ranks, index " +
             std::to_string(i) + " of " + std::to_string(count) + ": got " + std::to_string(g) + " want " +
             std::to_string(want) + " (the sum rounded before the division?)";
    }
  }
  return "";
}

// The 16-bit floats, and float32 whose mean must stay the float32 sum divided by the size.
inline const tfring::DataType kMeanRoundingTypes[] = {tfring::DataType::kFloat16, tfring::DataType::kBFloat16,
                                                      tfring::DataType::kFloat32};

// `count` elements of `elem` bytes at p as four pieces (one element, an empty piece, then the
// rest in two): the pieces an allreduce walks when tensors are reduced in place of the caller.
inline tfring::IoList splitPieces(uint8_t* p, size_t count, size_t elem) {
  const size_t first = std::min<size_t>(count, 1), second = (count - first) / 2;
  return {{p, first * elem},
          {p + first * elem, 0},
          {p + first * elem, second * elem},
          {p + (first + second) * elem, (count - first - second) * elem}};
}

}  // namespace tfring_test
