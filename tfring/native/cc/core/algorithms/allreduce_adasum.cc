#include "algorithms/allreduce_adasum.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "algorithms/reduce.h"
#include "common.h"

namespace tfring {
namespace {

// How each element type reads as double and is rounded back: float16 and bfloat16 through float32.
struct Half {
  using Raw = uint16_t;
  static double get(Raw h) { return halfToFloat(h); }
  static Raw put(double v) { return floatToHalf(static_cast<float>(v)); }
};
struct BHalf {
  using Raw = uint16_t;
  static double get(Raw h) { return bfloat16ToFloat(h); }
  static Raw put(double v) { return floatToBfloat16(static_cast<float>(v)); }
};
template <typename T>
struct Plain {
  using Raw = T;
  static double get(Raw v) { return v; }
  static Raw put(double v) { return static_cast<Raw>(v); }
};

// The coefficient of a vector whose norm² is `normsq`, against the other by `dot`.
double coefficient(double dot, double normsq) {
  static const double kTiny = std::sqrt(DBL_MIN);
  return normsq >= kTiny ? 1.0 - dot / normsq * 0.5 : 1.0;
}

bool isPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

// Four partial sums a quantity, summed in a fixed order at the end: the same order on every rank
// (so the ranks agree to the bit), and independent lanes the compiler can vectorize.
constexpr size_t kLanes = 4;

// out = adasum(a, b); out may be a.
template <typename K>
void pairOf(void* out, const void* a, const void* b, size_t count) {
  using Raw = typename K::Raw;
  auto* po = static_cast<Raw*>(out);
  const auto* pa = static_cast<const Raw*>(a);
  const auto* pb = static_cast<const Raw*>(b);
  double dot[kLanes] = {}, anormsq[kLanes] = {}, bnormsq[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      const double x = K::get(pa[i + l]), y = K::get(pb[i + l]);
      dot[l] += x * y;
      anormsq[l] += x * x;
      bnormsq[l] += y * y;
    }
  }
  for (; i < count; ++i) {
    const double x = K::get(pa[i]), y = K::get(pb[i]);
    dot[0] += x * y;
    anormsq[0] += x * x;
    bnormsq[0] += y * y;
  }
  static_assert(kLanes == 4, "total() adds four lanes");
  auto total = [](const double* v) { return (v[0] + v[1]) + (v[2] + v[3]); };
  const double d = total(dot);
  const double acoeff = coefficient(d, total(anormsq)), bcoeff = coefficient(d, total(bnormsq));
  for (size_t j = 0; j < count; ++j) po[j] = K::put(acoeff * K::get(pa[j]) + bcoeff * K::get(pb[j]));
}

void pairInto(void* out, const void* a, const void* b, size_t count, DataType type) {
  switch (type) {
    case DataType::kFloat16: return pairOf<Half>(out, a, b, count);
    case DataType::kBFloat16: return pairOf<BHalf>(out, a, b, count);
    case DataType::kFloat32: return pairOf<Plain<float>>(out, a, b, count);
    case DataType::kFloat64: return pairOf<Plain<double>>(out, a, b, count);
    default: throw Error(Code::kInvalidArgument, std::string("adasum: not a floating type: ") + dataTypeName(type));
  }
}

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

void adasumPair(void* a, const void* b, size_t count, DataType type) { pairInto(a, a, b, count, type); }

void adasumInTreeOrder(const std::vector<const uint8_t*>& blocks, const IoList& out, DataType type) {
  const int ranks = static_cast<int>(blocks.size());
  const std::string refused = adasumRefusal(ranks, type);
  if (!refused.empty()) throw Error(Code::kInvalidArgument, refused);
  // Level 1 reads the ranks' tensors where they are gathered and writes each pair's result to its
  // lower rank's place: rank 0's in `out`, the other even ranks' in a buffer; the levels above
  // combine those places in place.
  std::vector<std::vector<uint8_t>> work(ranks);
  size_t at = 0;
  for (const iovec& piece : out) {
    const size_t count = piece.iov_len / dataTypeSize(type);
    if (ranks == 1 && piece.iov_len > 0) std::memcpy(piece.iov_base, blocks[0] + at, piece.iov_len);
    for (int k = 2; k < ranks; k += 2) work[k].resize(piece.iov_len);
    auto place = [&](int k) -> void* { return k == 0 ? piece.iov_base : work[k].data(); };
    for (int level = 1; level < ranks; level *= 2) {
      for (int lower = 0; lower < ranks; lower += 2 * level) {
        const int upper = lower + level;
        if (level == 1) {
          pairInto(place(lower), blocks[lower] + at, blocks[upper] + at, count, type);
        } else {
          pairInto(place(lower), place(lower), place(upper), count, type);
        }
      }
    }
    at += piece.iov_len;
  }
}

}  // namespace tfring
