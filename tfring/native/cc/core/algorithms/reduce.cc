#include "algorithms/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common.h"

namespace tfring {

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
  }
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // overflow -> inf
  if (absx < 0x38800000u) {  // below the smallest normal half: a subnormal (or zero)
    float a;
    std::memcpy(&a, &absx, 4);
    // Scaling by 2^24 is exact, and nearbyint rounds to nearest even; 1024 encodes 2^-14.
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  uint32_t half = ((absx >> 13) - ((127 - 15) << 10));
  uint32_t rem = absx & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float bfloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToBfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet nan
  uint32_t rounding = 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

namespace {

struct Sum { template <typename T> T operator()(T a, T b) const { return a + b; } };
struct Prod { template <typename T> T operator()(T a, T b) const { return a * b; } };
// NumPy's minimum/maximum: a NaN on either side gives NaN, whatever order the ranks meet in
// (`a != a` is the NaN test; always false for integers).
struct Min { template <typename T> T operator()(T a, T b) const { return (a != a || a < b) ? a : b; } };
struct Max { template <typename T> T operator()(T a, T b) const { return (a != a || a > b) ? a : b; } };
// The last addition of a MEAN and its division. The sum is cast back to T first, so that a
// float32, float64 or integer mean keeps the bits of the former sum-then-divide (integers wrap
// and truncate as they did); T is float for the 16-bit floats, which are thus rounded once.
struct Mean {
  int divisor;
  template <typename T> T operator()(T a, T b) const {
    return static_cast<T>(static_cast<T>(a + b) / static_cast<T>(divisor));
  }
};

// Plain loops over restrict-free pointers: -O3 vectorises them; aliasing dst == a is allowed.
template <typename T, typename Op>
void loop(T* dst, const T* a, const T* b, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) dst[i] = op(a[i], b[i]);
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float), typename Op>
void loop16(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n, Op op) {
  // Widen in blocks so the conversion loops stay simple and the compiler can vectorise the math.
  constexpr size_t kBlock = 256;
  float fa[kBlock], fb[kBlock];
  for (size_t start = 0; start < n; start += kBlock) {
    size_t m = std::min(kBlock, n - start);
    for (size_t i = 0; i < m; ++i) fa[i] = Load(a[start + i]);
    for (size_t i = 0; i < m; ++i) fb[i] = Load(b[start + i]);
    for (size_t i = 0; i < m; ++i) fa[i] = op(fa[i], fb[i]);
    for (size_t i = 0; i < m; ++i) dst[start + i] = Store(fa[i]);
  }
}

#if defined(__SSE2__)
// Large float32 sums write their output with streaming (non-temporal) stores: a plain store first
// reads the destination line into the cache ("read for ownership"), which for buffers far larger
// than the cache adds a third of the memory traffic to a reduction that is bandwidth-bound.
constexpr size_t kStreamAbove = 256 << 10;

bool streamSumFloat32(float* dst, const float* a, const float* b, size_t n) {
  if (n * sizeof(float) < kStreamAbove) return false;
  size_t i = 0;
  while (i < n && (reinterpret_cast<uintptr_t>(dst + i) & 15) != 0) {
    dst[i] = a[i] + b[i];
    ++i;
  }
  if ((reinterpret_cast<uintptr_t>(dst + i) & 3) != 0) return false;  // not even float-aligned
  for (; i + 16 <= n; i += 16) {
    __m128 x0 = _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i));
    __m128 x1 = _mm_add_ps(_mm_loadu_ps(a + i + 4), _mm_loadu_ps(b + i + 4));
    __m128 x2 = _mm_add_ps(_mm_loadu_ps(a + i + 8), _mm_loadu_ps(b + i + 8));
    __m128 x3 = _mm_add_ps(_mm_loadu_ps(a + i + 12), _mm_loadu_ps(b + i + 12));
    _mm_stream_ps(dst + i, x0);
    _mm_stream_ps(dst + i + 4, x1);
    _mm_stream_ps(dst + i + 8, x2);
    _mm_stream_ps(dst + i + 12, x3);
  }
  for (; i < n; ++i) dst[i] = a[i] + b[i];
  _mm_sfence();  // streaming stores are weakly ordered: publish them before anyone is told
  return true;
}
#else
bool streamSumFloat32(float*, const float*, const float*, size_t) { return false; }
#endif

template <typename Op>
void dispatch(void* dst, const void* a, const void* b, size_t n, DataType type, Op op = Op()) {
  switch (type) {
    case DataType::kFloat32:
      if (std::is_same<Op, Sum>::value &&
          streamSumFloat32(static_cast<float*>(dst), static_cast<const float*>(a),
                           static_cast<const float*>(b), n)) {
        return;
      }
      return loop(static_cast<float*>(dst), static_cast<const float*>(a), static_cast<const float*>(b), n, op);
    case DataType::kFloat64:
      return loop(static_cast<double*>(dst), static_cast<const double*>(a), static_cast<const double*>(b), n, op);
    case DataType::kInt32:
      return loop(static_cast<int32_t*>(dst), static_cast<const int32_t*>(a), static_cast<const int32_t*>(b), n, op);
    case DataType::kInt64:
      return loop(static_cast<int64_t*>(dst), static_cast<const int64_t*>(a), static_cast<const int64_t*>(b), n, op);
    case DataType::kUint8:
      return loop(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), n, op);
    case DataType::kFloat16:
      return loop16<halfToFloat, floatToHalf>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(a),
                                              static_cast<const uint16_t*>(b), n, op);
    case DataType::kBFloat16:
      return loop16<bfloat16ToFloat, floatToBfloat16>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(a),
                                                      static_cast<const uint16_t*>(b), n, op);
  }
  throw Error(Code::kInvalidArgument, "reduce: unsupported data type");
}

}  // namespace

void reduceInto(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op) {
  if (count == 0) return;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return dispatch<Sum>(dst, a, b, count, type);
    case ReduceOp::kProduct:
      return dispatch<Prod>(dst, a, b, count, type);
    case ReduceOp::kMin:
      return dispatch<Min>(dst, a, b, count, type);
    case ReduceOp::kMax:
      return dispatch<Max>(dst, a, b, count, type);
    case ReduceOp::kAdasum:
      throw Error(Code::kInvalidArgument, "reduce: adasum is not elementwise (algorithms/allreduce_adasum.h)");
  }
  throw Error(Code::kInvalidArgument, "reduce: unknown reduce op");
}

void reduceMeanInto(void* dst, const void* a, const void* b, size_t count, DataType type, int divisor) {
  if (count == 0) return;
  if (divisor < 1) throw Error(Code::kInvalidArgument, "reduce: a mean over " + std::to_string(divisor) + " ranks");
  if (divisor == 1) return dispatch<Sum>(dst, a, b, count, type);
  dispatch<Mean>(dst, a, b, count, type, Mean{divisor});
}

}  // namespace tfring
