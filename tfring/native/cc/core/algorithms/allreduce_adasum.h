// Adasum, the adaptive summation of the ranks' gradients (Maleki et al., "Scaling Distributed
// Training with Adaptive Summation", MLSys 2021; Horovod's op=hvd.Adasum). Two gradients a and b
// combine as
//
//     adasum(a, b) = (1 - a·b / 2|a|²) a + (1 - a·b / 2|b|²) b
//
// which is their sum when they are orthogonal and their mean when they are parallel: ranks that
// learned different things add up, ranks that learned the same thing count once. The ranks
// combine pairwise in Horovod's recursive-doubling order: level 1 combines ranks (0, 1), (2, 3),
// ...; level 2 the results of (0, 1) and (2, 3); and so on, the lower group's vector always `a`.
// Hence the number of ranks must be a power of two (Horovod's CPU Adasum refuses others too).
//
// Per tensor: each tensor of a request has its own dot products, as in Horovod, so a fused
// request combines exactly as its tensors one by one would. The dot products and norms are
// accumulated in double; each level's combination is computed in double and rounded to the
// element type (float16 and bfloat16 through float32), as Horovod's ScaledAdd does. A norm² below
// sqrt(DBL_MIN) leaves its coefficient at 1, so adasum(0, b) = b.
//
// The engine gathers every rank's whole request (a ring allgather, after the request check),
// and every rank runs the same tree in the same order, so the ranks end with identical bits. Each
// rank receives (P-1)·N bytes, where Horovod's vector-halving exchange receives about 2N: the same
// result up to rounding, more bytes beyond 2 ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data_type.h"
#include "transport/transport.h"

namespace tfring {

// Why Adasum cannot combine `size` ranks' tensors of `type`, or "" when it can: the size must be
// a power of two and the type floating (float16, bfloat16, float32, float64).
std::string adasumRefusal(int size, DataType type);

// a = adasum(a, b) over `count` elements of `type` (a floating type), rounded once to it.
void adasumPair(void* a, const void* b, size_t count, DataType type);

// out = the Adasum of `blocks` (one per rank, in rank order; a power of two of them), tensor by
// tensor: each piece of `out` is one tensor, and each block holds totalBytes(out) bytes packed in
// the order of out's pieces. out may not overlap a block.
void adasumInTreeOrder(const std::vector<const uint8_t*>& blocks, const IoList& out, DataType type);

}  // namespace tfring
