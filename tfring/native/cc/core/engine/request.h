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

// New kinds go last: tfring.traffic() reads the counts in this order.
enum class OpKind { kAllreduce, kBroadcast, kAllgather, kBarrier, kReducescatter, kAlltoall, kJoin };

// "allreduce", "broadcast", ...: how errors name the collective.
inline const char* kindName(OpKind k) {
  switch (k) {
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllgather: return "allgather";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kReducescatter: return "reducescatter";
    case OpKind::kAlltoall: return "alltoall";
    case OpKind::kJoin: return "join";
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
// How reducescatter splits a first dimension of `rows` over `size` ranks (Horovod's rule): rank r
// gets rows / size, and one more when r < rows % size.
inline int64_t reducescatterRows(int64_t rows, int size, int rank) {
  return rows / size + (rank < rows % size ? 1 : 0);
}
// The rows before rank r's (its first row's index).
inline int64_t reducescatterFirstRow(int64_t rows, int size, int rank) {
  return rows / size * rank + (rank < rows % size ? rank : rows % size);
}

using HostCollective = std::function<void(void* data, size_t bytes)>;

struct Request {
  OpKind kind = OpKind::kAllreduce;
  std::string name;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  // Reducescatter: `in` is the whole tensor, `out` this rank's rows of it (rows split as
  // reducescatterRows says). Alltoall: one tensor, `in` its rows in destination order.
  std::vector<TensorRef> tensors;
  // Alltoall only: the rows of tensors[0] for each rank, in rank order (they sum to its first dimension).
  std::vector<int64_t> splits;
  // Reducescatter only, when not empty: tensor i goes whole to rank owners[i] (each tensor's
  // reduction on its owner alone, `out` null on the other ranks) instead of its rows split.
  std::vector<int> owners;
  // Allgather and alltoall: called on the engine thread once every rank's first dimension (the
  // rows each rank sends this one) is known; returns where the output goes (null and *error set
  // on failure).
  std::function<void*(const std::vector<int64_t>& firstDims, std::string* error)> allocate;
  // Join only (engine/join.h): called with the rank that joined last, before `done`.
  std::function<void(int lastJoined)> joined;
  std::function<void(const Status&)> done;
  // Allreduce and broadcast of tensors the engine must not touch (device memory): `tensors` only
  // describe them (shapes, sizes, for validation), and the engine calls `staged` with the host
  // collective instead. It moves the data through host buffers (cuda/pinned_staging.h), calling
  // the collective once per piece, pieces in the same order and of the same sizes on every rank.
  std::function<void(const HostCollective&)> staged;
};

}  // namespace tfring
