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

// pieces /= divisor, for MEAN once they hold the sum of `divisor` ranks.
void dividePieces(const IoList& pieces, DataType type, int divisor) {
  const size_t elem = dataTypeSize(type);
  for (const auto& p : pieces) divideBy(p.iov_base, p.iov_len / elem, type, divisor);
}

int mod(int x, int size) { return ((x % size) + size) % size; }

}  // namespace

IoList ownedPart(const Transport* t, int size, const IoList& out, DataType type) {
  const int mine = size == 1 ? 0 : ownedSegment(t->rank(), size);
  const Segments seg(totalBytes(out), dataTypeSize(type), size);
  return sliceIo(out, seg.start(mine), seg.length(mine));
}

void ringReduceScatter(Transport* t, int size, const IoList& in, const IoList& out, DataType type, ReduceOp op,
                       Deadline deadline) {
  if (size == 1) return copyPieces(in, out);
  const size_t elem = dataTypeSize(type);
  const Segments seg(totalBytes(in), elem, size);
  for (int step = 0; step < size - 1; ++step) {
    const int sendSeg = mod(t->rank() - step, size);
    const int recvSeg = mod(t->rank() - step - 1, size);
    const IoList& sendFrom = step == 0 ? in : out;
    RecvTarget target;
    target.bytes = seg.length(recvSeg);
    target.unit = elem;
    // The arriving partial sum covers every rank to our left; adding our own input completes it
    // by one more rank. Each segment is received and reduced exactly once per rank.
    const size_t recvStart = seg.start(recvSeg);
    target.consume = [&](const uint8_t* data, size_t offset, size_t len) {
      reducePieces(in, out, recvStart + offset, data, len, type, op);
    };
    t->sendRecv(sliceIo(sendFrom, seg.start(sendSeg), seg.length(sendSeg)), target, deadline);
  }
}

void ringAllgatherSegments(Transport* t, int size, const IoList& out, DataType type, Deadline deadline) {
  const Segments seg(totalBytes(out), dataTypeSize(type), size);
  for (int step = 0; step < size - 1; ++step) {
    const int sendSeg = mod(t->rank() + 1 - step, size);
    const int recvSeg = mod(t->rank() - step, size);
    RecvTarget target;
    target.bytes = seg.length(recvSeg);
    target.into = sliceIo(out, seg.start(recvSeg), seg.length(recvSeg));
    t->sendRecv(sliceIo(out, seg.start(sendSeg), seg.length(sendSeg)), target, deadline);
  }
}

void ringAllreduce(Transport* t, int size, const IoList& in, const IoList& out, DataType type, ReduceOp op,
                   Deadline deadline, int meanOver, const PhaseEnded& phaseEnded) {
  ringReduceScatter(t, size, in, out, type, op, deadline);
  // Our fully reduced segment; divide once here so every rank ends with the same bits.
  const int divisor = meanOver ? meanOver : size;
  if (op == ReduceOp::kMean && divisor > 1) dividePieces(ownedPart(t, size, out, type), type, divisor);
  if (phaseEnded) phaseEnded("reduce-scatter");
  if (size > 1) ringAllgatherSegments(t, size, out, type, deadline);
  if (phaseEnded) phaseEnded("allgather");
}

}  // namespace tfring
