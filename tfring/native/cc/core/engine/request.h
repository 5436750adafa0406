// What a caller asks the engine for: one collective over a list of tensors, described by raw
// pointers and sizes (the core never sees a framework's tensor), and a callback for the outcome.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data_type.h"
#include "status.h"

namespace tfring {

enum class OpKind { kAllreduce, kBroadcast, kAllgather, kBarrier };

// "allreduce", "broadcast", ...: how errors name the collective.
inline const char* kindName(OpKind k) {
  switch (k) {
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllgather: return "allgather";
    case OpKind::kBarrier: return "barrier";
  }
  return "collective";
}

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

}  // namespace tfring
