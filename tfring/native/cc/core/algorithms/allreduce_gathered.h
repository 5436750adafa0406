// The latency-bound end of allreduce: when a collective is small, every rank receives every
// rank's whole input (one framed allgather, allgather_framed.h, which also carries the request's
// digest) and reduces them itself, in rank order. P-1 ring steps instead of the ring allreduce's
// 2(P-1) plus the P-1 of the digest check: for a few KiB the number of steps is the cost, not
// the bytes (each rank receives (P-1)*N bytes instead of 2(P-1)/P*N).
//
// Every rank adds the same values in the same order (rank 0's, then rank 1's, ...) with the same
// kernel, so the results are bit-identical across ranks, as the ring's are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "data_type.h"
#include "transport/transport.h"

namespace tfring {

// What a rank may receive for a gathered allreduce: (P-1) blocks of N bytes. Against the ring's
// 2(P-1)/P*N bytes in 2(P-1) steps (plus the check's P-1), gathering saves 2(P-1) steps and costs
// (P-2)/P*N more bytes per link: worth it below N ~ 2*step latency*link rate/(1-2/P), about 25 KB
// for 4 ranks on a 1 Gbit/s link with 50 us steps (more on faster links, any N for 2 ranks). The
// budget gives 96 KiB for 2 ranks, 32 KiB for 4, 6 KiB for 16.
constexpr size_t kGatheredAllreduceBudget = 96 << 10;

// Whether an allreduce of `bytes` (all tensors of the request) over `size` ranks is gathered.
inline bool gathersAllreduce(size_t bytes, int size) {
  return size > 1 && bytes * static_cast<size_t>(size - 1) <= kGatheredAllreduceBudget;
}

// out = blocks[0] (op) blocks[1] (op) ... in that order; MEAN divides by blocks.size() in the
// last addition (reduceMeanInto).
// Each block holds totalBytes(out) bytes, packed in the order of out's pieces; out may not
// overlap a block.
void reduceInRankOrder(const std::vector<const uint8_t*>& blocks, const IoList& out, DataType type, ReduceOp op);

}  // namespace tfring
