#include "algorithms/allreduce_ring.h"

#include <cstring>
#include <string>
#include <vector>

#include "algorithms/reduce.h"

namespace tfring {
namespace {

// Copies `in` to `out` piece by piece (skipping pieces that are the same memory).
void copyPieces(const IoList& in, const IoList& out) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].iov_base != out[i].iov_base && in[i].iov_len) std::memcpy(out[i].iov_base, in[i].iov_base, in[i].iov_len);
  }
}

// out[range] = in[range] (op) data, walking the pieces that cover the range. MEAN: `divisor` > 1
// makes this the elements' last addition, divided as it is made.
void reducePieces(const IoList& in, const IoList& out, size_t offset, const uint8_t* data,
                  size_t len, DataType type, ReduceOp op, int divisor) {
  const size_t elem = dataTypeSize(type);
  IoList src = sliceIo(in, offset, len);
  IoList dst = sliceIo(out, offset, len);
  for (size_t i = 0; i < src.size(); ++i) {
    const size_t n = src[i].iov_len / elem;
    if (op == ReduceOp::kMean) {
      reduceMeanInto(dst[i].iov_base, src[i].iov_base, data, n, type, divisor);
    } else {
      reduceInto(dst[i].iov_base, src[i].iov_base, data, n, type, op);
    }
    data += src[i].iov_len;
  }
}

}  // namespace

IoList ownedPart(const Transport* t, int size, const IoList& out, DataType type) {
  const int mine = size == 1 ? 0 : ownedSegment(t->rank(), size);
  const Segments seg(totalBytes(out), dataTypeSize(type), size);
  return sliceIo(out, seg.start(mine), seg.length(mine));
}

namespace {

// Block boundaries given as explicit byte offsets (starts.size() == parts + 1).
struct Blocks {
  std::vector<size_t> starts;
  size_t start(int s) const { return starts[s]; }
  size_t length(int s) const { return starts[s + 1] - starts[s]; }
};

// The reduce-scatter loop over any cut of the data into `size` blocks: afterwards block
// (rank + shift) mod size of `out` holds the reduction of every rank's `in`.
template <typename Layout>
void reduceScatterBlocks(Transport* t, int size, const IoList& in, const IoList& out, const Layout& seg, int shift,
                         DataType type, ReduceOp op, Deadline deadline, int meanOver) {
  const size_t elem = dataTypeSize(type);
  for (int step = 0; step < size - 1; ++step) {
    const int sendSeg = ringIndex(t->rank() + shift - 1 - step, size);
    const int recvSeg = ringIndex(t->rank() + shift - 2 - step, size);
    const IoList& sendFrom = step == 0 ? in : out;
    RecvTarget target;
    target.bytes = seg.length(recvSeg);
    target.unit = elem;
    // The arriving partial sum covers every rank to our left; adding our own input completes it
    // by one more rank. Each block is received and reduced exactly once per rank; the last step
    // completes our owned block, where a MEAN divides.
    const size_t recvStart = seg.start(recvSeg);
    const int divisor = step == size - 2 ? meanOver : 1;
    target.consume = [&](const uint8_t* data, size_t offset, size_t len) {
      reducePieces(in, out, recvStart + offset, data, len, type, op, divisor);
    };
    t->sendRecv(sliceIo(sendFrom, seg.start(sendSeg), seg.length(sendSeg)), target, deadline);
  }
}

void checkMeanOver(int size, ReduceOp op, int meanOver) {
  if (size == 1 && op == ReduceOp::kMean && meanOver > 1) {
    // No addition to divide in: the divisor belongs to the ring that makes the last one.
    throw Error(Code::kInvalidArgument, "ring reduce-scatter: a mean over " + std::to_string(meanOver) +
                                            " ranks on a ring of one rank");
  }
}

}  // namespace

void ringReduceScatter(Transport* t, int size, const IoList& in, const IoList& out, DataType type, ReduceOp op,
                       Deadline deadline, int meanOver) {
  checkMeanOver(size, op, meanOver);
  if (size == 1) return copyPieces(in, out);
  const Segments seg(totalBytes(in), dataTypeSize(type), size);
  reduceScatterBlocks(t, size, in, out, seg, 1, type, op, deadline, meanOver);
}

void ringReduceScatterToRanks(Transport* t, int size, const IoList& in, const IoList& out,
                              const std::vector<size_t>& blockBytes, DataType type, ReduceOp op, Deadline deadline,
                              int meanOver) {
  checkMeanOver(size, op, meanOver);
  if (size == 1) return copyPieces(in, out);
  Blocks blocks;
  blocks.starts.push_back(0);
  for (size_t b : blockBytes) blocks.starts.push_back(blocks.starts.back() + b);
  if (blocks.starts.size() != static_cast<size_t>(size) + 1 || blocks.starts.back() != totalBytes(in)) {
    throw Error(Code::kInternal, "ring reduce-scatter: the blocks do not cut the data into one per rank");
  }
  reduceScatterBlocks(t, size, in, out, blocks, 0, type, op, deadline, meanOver);
}

void ringAllgatherSegments(Transport* t, int size, const IoList& out, DataType type, Deadline deadline) {
  const Segments seg(totalBytes(out), dataTypeSize(type), size);
  for (int step = 0; step < size - 1; ++step) {
    const int sendSeg = ringIndex(t->rank() + 1 - step, size);
    const int recvSeg = ringIndex(t->rank() - step, size);
    RecvTarget target;
    target.bytes = seg.length(recvSeg);
    target.into = sliceIo(out, seg.start(recvSeg), seg.length(recvSeg));
    t->sendRecv(sliceIo(out, seg.start(sendSeg), seg.length(sendSeg)), target, deadline);
  }
}

void ringAllreduce(Transport* t, int size, const IoList& in, const IoList& out, DataType type, ReduceOp op,
                   Deadline deadline, int meanOver, const PhaseEnded& phaseEnded) {
  // MEAN divides on the segment's owner as it completes it: every rank then gets the owner's bits.
  ringReduceScatter(t, size, in, out, type, op, deadline, meanOver ? meanOver : size);
  if (phaseEnded) phaseEnded("reduce-scatter");
  if (size > 1) ringAllgatherSegments(t, size, out, type, deadline);
  if (phaseEnded) phaseEnded("allgather");
}

}  // namespace tfring
