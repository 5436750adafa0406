#include "algorithms/allreduce_adasum.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "algorithms/reduce.h"
#include "common.h"

namespace tfring {
namespace {

double load(const uint8_t* p, size_t i, DataType type) {
  switch (type) {
    case DataType::kFloat16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); return halfToFloat(h); }
    case DataType::kBFloat16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); return bfloat16ToFloat(h); }
    case DataType::kFloat32: { float f; std::memcpy(&f, p + 4 * i, 4); return f; }
    case DataType::kFloat64: { double f; std::memcpy(&f, p + 8 * i, 8); return f; }
    default: throw Error(Code::kInvalidArgument, std::string("adasum: not a floating type: ") + dataTypeName(type));
  }
}

void store(uint8_t* p, size_t i, DataType type, double v) {
  switch (type) {
    case DataType::kFloat16: {
      const uint16_t h = floatToHalf(static_cast<float>(v));
      std::memcpy(p + 2 * i, &h, 2);
      return;
    }
    case DataType::kBFloat16: {
      const uint16_t h = floatToBfloat16(static_cast<float>(v));
      std::memcpy(p + 2 * i, &h, 2);
      return;
    }
    case DataType::kFloat32: { float f = static_cast<float>(v); std::memcpy(p + 4 * i, &f, 4); return; }
    case DataType::kFloat64: std::memcpy(p + 8 * i, &v, 8); return;
    default: throw Error(Code::kInvalidArgument, std::string("adasum: not a floating type: ") + dataTypeName(type));
  }
}

// The coefficient of a vector whose norm² is `normsq`, against the other by `dot`.
double coefficient(double dot, double normsq) {
  static const double kTiny = std::sqrt(DBL_MIN);
  return normsq >= kTiny ? 1.0 - dot / normsq * 0.5 : 1.0;
}

bool isPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

std::string adasumRefusal(int size, DataType type) {
  if (!isPowerOfTwo(size)) {
    return "Adasum combines the ranks pairwise and needs a power of two of them (1, 2, 4, 8, ...), not " +
           std::to_string(size) + " (Horovod refuses the same)";
  }
  if (type != DataType::kFloat16 && type != DataType::kBFloat16 && type != DataType::kFloat32 &&
      type != DataType::kFloat64) {
    return std::string("Adasum combines floating-point tensors (float16, bfloat16, float32, float64), not ") +
           dataTypeName(type);
  }
  return "";
}

void adasumPair(void* a, const void* b, size_t count, DataType type) {
  auto* pa = static_cast<uint8_t*>(a);
  const auto* pb = static_cast<const uint8_t*>(b);
  double dot = 0, anormsq = 0, bnormsq = 0;
  for (size_t i = 0; i < count; ++i) {
    const double x = load(pa, i, type), y = load(pb, i, type);
    dot += x * y;
    anormsq += x * x;
    bnormsq += y * y;
  }
  const double acoeff = coefficient(dot, anormsq), bcoeff = coefficient(dot, bnormsq);
  for (size_t i = 0; i < count; ++i) store(pa, i, type, acoeff * load(pa, i, type) + bcoeff * load(pb, i, type));
}

void adasumInTreeOrder(const std::vector<const uint8_t*>& blocks, const IoList& out, DataType type) {
  const int ranks = static_cast<int>(blocks.size());
  const std::string refused = adasumRefusal(ranks, type);
  if (!refused.empty()) throw Error(Code::kInvalidArgument, refused);
  std::vector<std::vector<uint8_t>> work(ranks);  // each rank's copy of the tensor being combined
  size_t at = 0;
  for (const iovec& piece : out) {
    for (int k = 1; k < ranks; ++k) work[k].assign(blocks[k] + at, blocks[k] + at + piece.iov_len);
    if (piece.iov_len > 0) std::memcpy(piece.iov_base, blocks[0] + at, piece.iov_len);
    const size_t count = piece.iov_len / dataTypeSize(type);
    for (int level = 1; level < ranks; level *= 2) {
      for (int lower = 0; lower < ranks; lower += 2 * level) {
        void* a = lower == 0 ? piece.iov_base : work[lower].data();
        adasumPair(a, work[lower + level].data(), count, type);
      }
    }
    at += piece.iov_len;
  }
}

}  // namespace tfring
