// How a grouped allreduce is cut into passes over the ring (tensor fusion, Jia et al. 2018;
// Horovod's fusion buffer).
//
// A pass takes consecutive tensors while their bytes stay within the fusion threshold (a bigger
// tensor goes alone; threshold 0: one tensor per pass). Inside a pass, tensors below kPackBelow
// are copied into one fusion buffer, so many small gradients cost one ring allreduce instead of
// one each; larger ones are reduced where they lie (the ring reads them in place), which avoids
// two full copies of big gradients. Every rank cuts the same list the same way: the cut depends
// only on the sizes and the threshold, which rendezvous and the request digest check agree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/request.h"
#include "transport/transport.h"

namespace tfring {

constexpr size_t kPackBelow = 256 << 10;

struct FusionPass {
  size_t begin = 0;      // tensors [begin, end) of the request
  size_t end = 0;
  size_t packBytes = 0;  // bytes of the packed tensors (0: none is packed)

  bool packs(const TensorRef& t) const { return packBytes > 0 && t.bytes < kPackBelow; }
  // Copies the packed tensors into `buffer` (packBytes long) and lists what the ring reduces:
  // the packed region first, then every other tensor in place.
  void pack(const std::vector<TensorRef>& tensors, uint8_t* buffer, IoList* in, IoList* out) const;
  // Copies the reduced packed tensors from `buffer` to their outputs.
  void unpack(const std::vector<TensorRef>& tensors, const uint8_t* buffer) const;
};

std::vector<FusionPass> planFusion(const std::vector<TensorRef>& tensors, size_t thresholdBytes);

}  // namespace tfring
