#include "engine/fusion_plan.h"

#include <cstring>

namespace tfring {

std::vector<FusionPass> planFusion(const std::vector<TensorRef>& tensors, size_t thresholdBytes) {
  std::vector<FusionPass> passes;
  size_t i = 0;
  while (i < tensors.size()) {
    FusionPass pass;
    pass.begin = i;
    size_t passBytes = 0;
    do {
      passBytes += tensors[i].bytes;
      if (thresholdBytes > 0 && tensors[i].bytes < kPackBelow) pass.packBytes += tensors[i].bytes;
      ++i;
    } while (thresholdBytes > 0 && i < tensors.size() && passBytes + tensors[i].bytes <= thresholdBytes);
    pass.end = i;
    passes.push_back(pass);
  }
  return passes;
}

void FusionPass::pack(const std::vector<TensorRef>& tensors, uint8_t* buffer, IoList* in, IoList* out) const {
  if (packBytes) {
    size_t at = 0;
    for (size_t k = begin; k < end; ++k) {
      const TensorRef& t = tensors[k];
      if (!packs(t)) continue;
      if (t.bytes) std::memcpy(buffer + at, t.in, t.bytes);
      at += t.bytes;
    }
    in->push_back({buffer, packBytes});
    out->push_back({buffer, packBytes});
  }
  for (size_t k = begin; k < end; ++k) {
    const TensorRef& t = tensors[k];
    if (packs(t)) continue;
    in->push_back({const_cast<void*>(t.in), t.bytes});
    out->push_back({t.out, t.bytes});
  }
}

void FusionPass::unpack(const std::vector<TensorRef>& tensors, const uint8_t* buffer) const {
  size_t at = 0;
  for (size_t k = begin; k < end; ++k) {
    const TensorRef& t = tensors[k];
    if (!packs(t)) continue;
    if (t.bytes) std::memcpy(t.out, buffer + at, t.bytes);
    at += t.bytes;
  }
}

}  // namespace tfring
