#include "algorithms/allreduce_ring.h"

#include <cstring>

#include "algorithms/reduce.h"

namespace tfring {
namespace {

// Copies `in` to `out` piece by piece (skipping pieces that are the same memory).
void copyPieces(const IoList& in, const IoList& out) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].iov_base != out[i].iov_base && in[i].iov_len) std::memcpy(out[i].iov_base, in[i].iov_base, in[i].iov_len);
  }
}

// out[range] = in[range] (op) data, walking the pieces that cover the range.
void reducePieces(const IoList& in, const IoList& out, size_t offset, const uint8_t* data,
                  size_t len, DataType type, ReduceOp op) {
  const size_t elem = dataTypeSize(type);
  IoList src = sliceIo(in, offset, len);
  IoList dst = sliceIo(out, offset, len);
  for (size_t i = 0; i < src.size(); ++i) {
    reduceInto(dst[i].iov_base, src[i].iov_base, data, src[i].iov_len / elem, type, op);
    data += src[i].iov_len;
  }
}

void dividePieces(const IoList& out, size_t offset, size_t len, DataType type, int divisor) {
  const size_t elem = dataTypeSize(type);
  for (const auto& p : sliceIo(out, offset, len)) divideBy(p.iov_base, p.iov_len / elem, type, divisor);
}

}  // namespace

void ringAllreduce(Transport* t, int size, const IoList& in, const IoList& out, DataType type,
                   ReduceOp op, Deadline deadline) {
  if (size == 1) {
    copyPieces(in, out);
    return;
  }
  const size_t elem = dataTypeSize(type);
  const size_t count = totalBytes(in) / elem;
  const int rank = t->rank();
  auto segStart = [&](int s) { return (count * static_cast<size_t>(s) / size) * elem; };
  auto segLen = [&](int s) { return segStart(s + 1) - segStart(s); };
  auto mod = [&](int x) { return ((x % size) + size) % size; };

  for (int step = 0; step < size - 1; ++step) {
    const int sendSeg = mod(rank - step);
    const int recvSeg = mod(rank - step - 1);
    const IoList& sendFrom = step == 0 ? in : out;
    RecvTarget target;
    target.bytes = segLen(recvSeg);
    target.unit = elem;
    // The arriving partial sum covers every rank to our left; adding our own input completes it
    // by one more rank. Each segment is received and reduced exactly once per rank.
    const size_t recvStart = segStart(recvSeg);
    target.consume = [&](const uint8_t* data, size_t offset, size_t len) {
      reducePieces(in, out, recvStart + offset, data, len, type, op);
    };
    t->sendRecv(sliceIo(sendFrom, segStart(sendSeg), segLen(sendSeg)), target, deadline);
  }
  // Our fully reduced segment; divide once here so every rank ends with the same bits.
  const int owned = mod(rank + 1);
  if (op == ReduceOp::kMean) dividePieces(out, segStart(owned), segLen(owned), type, size);

  for (int step = 0; step < size - 1; ++step) {
    const int sendSeg = mod(rank + 1 - step);
    const int recvSeg = mod(rank - step);
    RecvTarget target;
    target.bytes = segLen(recvSeg);
    target.into = sliceIo(out, segStart(recvSeg), segLen(recvSeg));
    t->sendRecv(sliceIo(out, segStart(sendSeg), segLen(sendSeg)), target, deadline);
  }
}

}  // namespace tfring
