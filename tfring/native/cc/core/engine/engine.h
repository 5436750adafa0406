// The engine: one background thread per process that executes collectives strictly in the order
// they were enqueued. The TF glue chains a graph's collectives with control dependencies, so every
// rank enqueues the same collectives in the same order and no per-step negotiation is needed.
//
// Before moving data, each collective exchanges a digest of what every rank passed (kind, dtype,
// reduce op, root, tensor count and shapes): ranks that disagree all fail that one collective
// with kInvalidArgument naming the tensor and the shapes, and stay usable. A peer that dies or
// stalls fails the collective with kUnavailable naming the rank, and from then on every pending
// and future collective fails at once: the ring cannot heal, and waiting would only hang.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "config.h"
#include "data_type.h"
#include "rendezvous/store.h"
#include "status.h"
#include "transport/transport.h"

namespace tfring {

enum class OpKind { kAllreduce, kBroadcast, kAllgather, kBarrier };

struct TensorRef {
  const void* in = nullptr;
  void* out = nullptr;  // may equal in
  size_t bytes = 0;
  std::vector<int64_t> shape;
};

// The host part of a collective whose tensors live elsewhere (GPU memory): runs the request's
// collective in place on `bytes` bytes at `data`, a host buffer. Throws as the ring does.
using HostCollective = std::function<void(void* data, size_t bytes)>;

struct Request {
  OpKind kind = OpKind::kAllreduce;
  std::string name;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  std::vector<TensorRef> tensors;
  // Allgather only: called on the engine thread once every rank's first dimension is known;
  // returns where the gathered tensor goes (null and *error set on failure).
  std::function<void*(const std::vector<int64_t>& firstDims, std::string* error)> allocate;
  std::function<void(const Status&)> done;
  // Allreduce and broadcast of tensors the engine must not touch (device memory): `tensors` only
  // describe them (shapes, sizes, for validation), and the engine calls `staged` with the host
  // collective instead. It moves the data through host buffers (cuda/pinned_staging.h), calling
  // the collective once per piece, pieces in the same order and of the same sizes on every rank.
  std::function<void(const HostCollective&)> staged;
};

class Engine {
 public:
  // `store` (may be null) is only used to leave and read the reason of a failure.
  Engine(const Config& config, std::unique_ptr<Transport> transport, std::shared_ptr<Store> store);
  ~Engine();
  // Never blocks; `done` runs on the engine thread (or here, if the engine already failed).
  void enqueue(Request request);
  std::string transportName() const;

 private:
  void loop();
  void execute(Request& r);
  void validate(const Request& r, Deadline d);
  void allreduce(Request& r, Deadline d);
  void staged(Request& r, Deadline d);
  void allgather(Request& r, Deadline d);
  // Records a fatal failure, aborts the transport and fails everything queued.
  Status fail(const std::string& what, int peer);

  Config config_;
  std::unique_ptr<Transport> transport_;
  std::shared_ptr<Store> store_;
  std::vector<uint8_t> fusion_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> queue_;
  bool stop_ = false;
  Status failure_;
  std::thread thread_;
};

}  // namespace tfring
