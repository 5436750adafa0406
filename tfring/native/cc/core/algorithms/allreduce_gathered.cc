#include "algorithms/allreduce_gathered.h"

#include <cstring>

#include "algorithms/reduce.h"

namespace tfring {

void reduceInRankOrder(const std::vector<const uint8_t*>& blocks, const IoList& out, DataType type, ReduceOp op) {
  const size_t elem = dataTypeSize(type);
  const int ranks = static_cast<int>(blocks.size());
  size_t at = 0;
  for (const iovec& piece : out) {
    const size_t count = piece.iov_len / elem;
    if (count > 0) std::memcpy(piece.iov_base, blocks[0] + at, piece.iov_len);
    for (int k = 1; k < ranks; ++k) {
      if (op == ReduceOp::kMean) {
        // The last rank's block is the last addition: there a MEAN divides, rounded once.
        reduceMeanInto(piece.iov_base, piece.iov_base, blocks[k] + at, count, type, k == ranks - 1 ? ranks : 1);
      } else {
        reduceInto(piece.iov_base, piece.iov_base, blocks[k] + at, count, type, op);
      }
    }
    at += piece.iov_len;
  }
}

}  // namespace tfring
