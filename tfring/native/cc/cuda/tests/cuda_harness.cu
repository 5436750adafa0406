// The framework-free test harness of the CUDA kernels: every kernel against the CPU core's
// results (core/reduce.cc, core/lars.cc) for sizes 0, 1, 4099 and 10^8, at aligned and unaligned
// offsets; then the bandwidth of each kernel (reduce, mean, casts, pack/unpack, LARS) as a fraction
// of the device's copy bandwidth.
//
//   .build/cuda_harness            everything
//   .build/cuda_harness --quick    without the 10^8-element cases
// Exit status 0 only when every check passed.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "../cuda_kernels.h"
#include "algorithms/lars.h"
#include "algorithms/reduce.h"

using namespace tfring;

namespace {

int failures = 0;
int checks = 0;

#define CUDA_OK(call)                                                                          \
  do {                                                                                         \
    cudaError_t status_ = (call);                                                              \
    if (status_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(status_)); \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

void report(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::printf("FAIL %s\n", what.c_str());
  }
}

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { CUDA_OK(cudaMalloc(&ptr, bytes ? bytes : 1)); }
  ~DeviceBuffer() { cudaFree(ptr); }
  char* bytes() { return static_cast<char*>(ptr); }
};

// splitmix64: a fast, well-mixed stream, so the 10^8-element cases spend their time on the checks.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Random contents for a type: small integers (products stay in range), floats in [-2, 2].
std::vector<char> randomData(DataType type, size_t count, unsigned seed) {
  std::vector<char> out(count * dataTypeSize(type));
  const uint64_t base = static_cast<uint64_t>(seed) << 40;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t r = mix(base + i);
    const float real = static_cast<float>(r >> 40) / static_cast<float>(1 << 24) * 4.0f - 2.0f;
    const int small = static_cast<int>(r % 7) - 3;
    switch (type) {
      case DataType::kFloat16: { uint16_t h = floatToHalf(real); std::memcpy(&out[i * 2], &h, 2); break; }
      case DataType::kBFloat16: { uint16_t b = floatToBfloat16(real); std::memcpy(&out[i * 2], &b, 2); break; }
      case DataType::kFloat32: { std::memcpy(&out[i * 4], &real, 4); break; }
      case DataType::kFloat64: { double d = real; std::memcpy(&out[i * 8], &d, 8); break; }
      case DataType::kInt32: { int32_t v = small; std::memcpy(&out[i * 4], &v, 4); break; }
      case DataType::kInt64: { int64_t v = small; std::memcpy(&out[i * 8], &v, 8); break; }
      case DataType::kUint8: { out[i] = static_cast<char>(static_cast<uint8_t>(small + 3)); break; }
    }
  }
  return out;
}

std::string label(const char* what, DataType type, size_t count, size_t offset, const char* extra = "") {
  char text[200];
  std::snprintf(text, sizeof(text), "%s %s n=%zu offset=%zu %s", what, dataTypeName(type), count, offset, extra);
  return text;
}

void checkReduce(DataType type, ReduceOp op, size_t count, size_t offset) {
  const size_t elem = dataTypeSize(type), bytes = count * elem, shift = offset * elem;
  auto a = randomData(type, count, 1), b = randomData(type, count, 2);
  std::vector<char> want(bytes), got(bytes);
  reduceInto(want.data(), a.data(), b.data(), count, type, op);
  DeviceBuffer da(bytes + shift), db(bytes + shift), dd(bytes + shift);
  CUDA_OK(cudaMemcpy(da.bytes() + shift, a.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db.bytes() + shift, b.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cuda::reduceInto(dd.bytes() + shift, da.bytes() + shift, db.bytes() + shift, count, type, op, 0));
  CUDA_OK(cudaMemcpy(got.data(), dd.bytes() + shift, bytes, cudaMemcpyDeviceToHost));
  report(want == got, label("reduce", type, count, offset, reduceOpName(op)));
  // In place (dst aliases a), as the ring does.
  CUDA_OK(cuda::reduceInto(da.bytes() + shift, da.bytes() + shift, db.bytes() + shift, count, type, op, 0));
  CUDA_OK(cudaMemcpy(got.data(), da.bytes() + shift, bytes, cudaMemcpyDeviceToHost));
  report(want == got, label("reduce in place", type, count, offset, reduceOpName(op)));
}

// min/max with a NaN on either side give NaN (NumPy's minimum/maximum), as on the CPU.
void checkNanMinMax() {
  const float nan = std::nanf("");
  const float a[4] = {nan, 1.0f, nan, 2.0f}, b[4] = {3.0f, nan, nan, 1.0f};
  DeviceBuffer da(sizeof(a)), db(sizeof(b)), dd(sizeof(a));
  CUDA_OK(cudaMemcpy(da.bytes(), a, sizeof(a), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db.bytes(), b, sizeof(b), cudaMemcpyHostToDevice));
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    float got[4];
    CUDA_OK(cuda::reduceInto(dd.bytes(), da.bytes(), db.bytes(), 4, DataType::kFloat32, op, 0));
    CUDA_OK(cudaMemcpy(got, dd.bytes(), sizeof(got), cudaMemcpyDeviceToHost));
    const float last = op == ReduceOp::kMin ? 1.0f : 2.0f;
    report(std::isnan(got[0]) && std::isnan(got[1]) && std::isnan(got[2]) && got[3] == last,
           std::string("NaN propagates through ") + reduceOpName(op));
  }
}

// The last step of a MEAN over 3 ranks against the CPU's (core/reduce.h), out of place and in place.
void checkMean(DataType type, size_t count, size_t offset) {
  const size_t elem = dataTypeSize(type), bytes = count * elem, shift = offset * elem;
  auto a = randomData(type, count, 3), b = randomData(type, count, 5);
  std::vector<char> want(bytes), got(bytes);
  reduceMeanInto(want.data(), a.data(), b.data(), count, type, 3);
  DeviceBuffer da(bytes + shift), db(bytes + shift), dd(bytes + shift);
  CUDA_OK(cudaMemcpy(da.bytes() + shift, a.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db.bytes() + shift, b.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cuda::reduceMeanInto(dd.bytes() + shift, da.bytes() + shift, db.bytes() + shift, count, type, 3, 0));
  CUDA_OK(cudaMemcpy(got.data(), dd.bytes() + shift, bytes, cudaMemcpyDeviceToHost));
  report(want == got, label("mean of 3", type, count, offset));
  CUDA_OK(cuda::reduceMeanInto(da.bytes() + shift, da.bytes() + shift, db.bytes() + shift, count, type, 3, 0));
  CUDA_OK(cudaMemcpy(got.data(), da.bytes() + shift, bytes, cudaMemcpyDeviceToHost));
  report(want == got, label("mean of 3 in place", type, count, offset));
}

// A 16-bit mean is rounded once: float16 201 + 85.875 over 3 ranks is 95.625 (rounding the sum
// to 287 first would give 95.6875), bfloat16 354 + 248 is 201 (not 600 / 3 = 200).
void checkMeanRoundsOnce() {
  const uint16_t half[2] = {floatToHalf(201.0f), floatToHalf(85.875f)};
  const uint16_t bf16[2] = {floatToBfloat16(354.0f), floatToBfloat16(248.0f)};
  DeviceBuffer d(8);
  uint16_t got[2];
  CUDA_OK(cudaMemcpy(d.bytes(), half, 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d.bytes() + 4, bf16, 4, cudaMemcpyHostToDevice));
  CUDA_OK(cuda::reduceMeanInto(d.bytes(), d.bytes(), d.bytes() + 2, 1, DataType::kFloat16, 3, 0));
  CUDA_OK(cuda::reduceMeanInto(d.bytes() + 4, d.bytes() + 4, d.bytes() + 6, 1, DataType::kBFloat16, 3, 0));
  CUDA_OK(cudaMemcpy(&got[0], d.bytes(), 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&got[1], d.bytes() + 4, 2, cudaMemcpyDeviceToHost));
  report(halfToFloat(got[0]) == 95.625f, "float16 mean of 3 rounded once");
  report(bfloat16ToFloat(got[1]) == 201.0f, "bfloat16 mean of 3 rounded once");
}

void checkCast(DataType narrow, size_t count, size_t offset) {
  auto src = randomData(DataType::kFloat32, count, 4);
  const float* f = reinterpret_cast<const float*>(src.data());
  std::vector<uint16_t> want(count), got(count);
  std::vector<float> back(count), gotBack(count);
  for (size_t i = 0; i < count; ++i) {
    want[i] = narrow == DataType::kFloat16 ? floatToHalf(f[i]) : floatToBfloat16(f[i]);
    back[i] = narrow == DataType::kFloat16 ? halfToFloat(want[i]) : bfloat16ToFloat(want[i]);
  }
  DeviceBuffer d32(count * 4 + offset * 4), d16(count * 2 + offset * 2);
  CUDA_OK(cudaMemcpy(d32.bytes() + offset * 4, src.data(), count * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cuda::castFloat(d16.bytes() + offset * 2, narrow, d32.bytes() + offset * 4, DataType::kFloat32, count, 0));
  CUDA_OK(cudaMemcpy(got.data(), d16.bytes() + offset * 2, count * 2, cudaMemcpyDeviceToHost));
  report(want == got, label("cast float32 ->", narrow, count, offset));
  CUDA_OK(cuda::castFloat(d32.bytes() + offset * 4, DataType::kFloat32, d16.bytes() + offset * 2, narrow, count, 0));
  CUDA_OK(cudaMemcpy(gotBack.data(), d32.bytes() + offset * 4, count * 4, cudaMemcpyDeviceToHost));
  report(std::memcmp(back.data(), gotBack.data(), count * 4) == 0, label("cast -> float32", narrow, count, offset));
}

void checkPack(int tensors, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> sizes(0, 5000);
  std::vector<cuda::PackEntry> entries(tensors);
  std::vector<std::vector<char>> contents(tensors);
  std::vector<DeviceBuffer*> buffers;
  size_t offset = 0, largest = 0;
  for (int t = 0; t < tensors; ++t) {
    size_t bytes = sizes(rng) | (t % 3 == 0 ? 1 : 0);  // odd sizes: unaligned offsets follow
    contents[t] = randomData(DataType::kUint8, bytes, seed + t);
    buffers.push_back(new DeviceBuffer(bytes));
    CUDA_OK(cudaMemcpy(buffers.back()->ptr, contents[t].data(), bytes, cudaMemcpyHostToDevice));
    entries[t] = {buffers.back()->ptr, offset, bytes};
    offset += bytes;
    largest = std::max(largest, bytes);
  }
  DeviceBuffer fusion(offset), table(sizeof(cuda::PackEntry) * tensors);
  CUDA_OK(cudaMemcpy(table.ptr, entries.data(), sizeof(cuda::PackEntry) * tensors, cudaMemcpyHostToDevice));
  CUDA_OK(cuda::pack(fusion.ptr, static_cast<cuda::PackEntry*>(table.ptr), tensors, largest, 0));
  std::vector<char> packed(offset), expected;
  for (auto& c : contents) expected.insert(expected.end(), c.begin(), c.end());
  CUDA_OK(cudaMemcpy(packed.data(), fusion.ptr, offset, cudaMemcpyDeviceToHost));
  report(packed == expected, "pack " + std::to_string(tensors) + " tensors");
  for (auto* b : buffers) CUDA_OK(cudaMemset(b->ptr, 0, 1));
  for (int t = 0; t < tensors; ++t) CUDA_OK(cudaMemset(entries[t].tensor, 0, entries[t].bytes));
  CUDA_OK(cuda::unpack(fusion.ptr, static_cast<cuda::PackEntry*>(table.ptr), tensors, largest, 0));
  bool ok = true;
  for (int t = 0; t < tensors; ++t) {
    std::vector<char> back(entries[t].bytes);
    CUDA_OK(cudaMemcpy(back.data(), entries[t].tensor, back.size(), cudaMemcpyDeviceToHost));
    ok = ok && back == contents[t];
  }
  report(ok, "unpack " + std::to_string(tensors) + " tensors");
  for (auto* b : buffers) delete b;
}

bool close(double got, double want, double rtol, double atol) { return std::fabs(got - want) <= atol + rtol * std::fabs(want); }

template <typename T>
void checkLars(size_t n, LarsParams p, bool zeroWeights, const char* name) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<T> w(n), g(n);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    float wi = zeroWeights ? 0.0f : normal(rng), gi = 0.1f * normal(rng);
    if constexpr (std::is_same<T, Half>::value) {
      w[i].bits = floatToHalf(wi);
      g[i].bits = floatToHalf(gi);
    } else {
      w[i] = wi;
      g[i] = gi;
    }
    v[i] = 0.01f * normal(rng);
  }
  std::vector<T> wCpu = w;
  std::vector<float> vCpu = v;
  double ratioCpu = larsUpdate(wCpu.data(), vCpu.data(), g.data(), n, 0.5, p);
  DeviceBuffer dw(n * sizeof(T)), dv(n * 4), dg(n * sizeof(T)), scratch(cuda::larsScratchBytes(n)), dr(4);
  CUDA_OK(cudaMemcpy(dw.ptr, w.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dv.ptr, v.data(), n * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dg.ptr, g.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_OK(cuda::larsUpdate(static_cast<T*>(dw.ptr), static_cast<float*>(dv.ptr), static_cast<T*>(dg.ptr), n, 0.5f, p,
                           scratch.ptr, static_cast<float*>(dr.ptr), 0));
  std::vector<T> wGpu(n);
  std::vector<float> vGpu(n);
  float ratioGpu = 0;
  CUDA_OK(cudaMemcpy(wGpu.data(), dw.ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(vGpu.data(), dv.ptr, n * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&ratioGpu, dr.ptr, 4, cudaMemcpyDeviceToHost));
  bool ok = n == 0 || close(ratioGpu, ratioCpu, 1e-6, 0);
  const bool half = std::is_same<T, Half>::value;
  // The GPU contracts a * b + c into one rounding (FMA) where the CPU rounds twice, so results
  // differ by an ulp or so of the operands, not of the result: where w - (m v + step) or
  // m v + step cancel, the result is small and its relative error large. The tolerance is
  // therefore relative to the larger operand (the old value, or the step).
  auto value = [](const T& x) -> double {
    if constexpr (std::is_same<T, Half>::value) {
      return halfToFloat(x.bits);
    } else {
      return x;
    }
  };
  const double rate = 0.5 * ratioCpu;
  double wError = 0, vError = 0;  // the largest, each relative to its operands
  for (size_t i = 0; i < n; ++i) {
    const double step = rate * std::fabs(value(g[i])) + std::fabs(v[i]) + std::fabs(vCpu[i]) + 1e-30;
    wError = std::max(wError, std::fabs(value(wGpu[i]) - value(wCpu[i])) / std::max(std::fabs(value(w[i])), step));
    vError = std::max(vError, std::fabs(vGpu[i] - vCpu[i]) / step);
  }
  // A few ulps: float32's is 2^-23 = 1.2e-7 (the velocity is always float32), float16's 2^-10.
  ok = ok && wError <= (half ? 2e-3 : 6e-7) && vError <= 6e-7;
  char text[200];
  std::snprintf(text, sizeof(text), "lars %s %s n=%zu (ratio gpu %.9g cpu %.9g; error w %.2g v %.2g)",
                half ? "float16" : "float32", name, n, ratioGpu, ratioCpu, wError, vError);
  report(ok, text);
}

// GB/s of `launch` (bytes moved per call: reads plus writes), from CUDA events over 20 calls
// after one warm-up call.
template <typename Launch>
double gbPerSecond(double bytesPerCall, Launch launch) {
  const int reps = 20;
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  launch();
  CUDA_OK(cudaEventRecord(start));
  for (int r = 0; r < reps; ++r) launch();
  CUDA_OK(cudaEventRecord(stop));
  CUDA_OK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return bytesPerCall * reps / (ms * 1e6);
}

void printShare(const char* what, double gbs, double copyGBs) {
  std::printf("%s: %.1f GB/s = %.1f%% of copy bandwidth\n", what, gbs, 100.0 * gbs / copyGBs);
}

void bandwidth() {
  const size_t n = 100000000;  // 10^8 float32
  DeviceBuffer a(n * 4), b(n * 4), d(n * 4);
  CUDA_OK(cudaMemset(a.ptr, 0, n * 4));
  CUDA_OK(cudaMemset(b.ptr, 0, n * 4));
  const double copyGBs = gbPerSecond(2.0 * n * 4, [&] {  // read + write
    CUDA_OK(cudaMemcpyAsync(d.ptr, a.ptr, n * 4, cudaMemcpyDeviceToDevice));
  });
  const double reduceGBs = gbPerSecond(3.0 * n * 4, [&] {  // 2 reads + 1 write
    CUDA_OK(cuda::reduceInto(d.ptr, a.ptr, b.ptr, n, DataType::kFloat32, ReduceOp::kSum, 0));
  });
  const double halfGBs = gbPerSecond(3.0 * n * 4, [&] {
    CUDA_OK(cuda::reduceInto(d.ptr, a.ptr, b.ptr, n * 2, DataType::kFloat16, ReduceOp::kSum, 0));
  });
  const double meanGBs = gbPerSecond(3.0 * n * 4, [&] {
    CUDA_OK(cuda::reduceMeanInto(d.ptr, a.ptr, b.ptr, n, DataType::kFloat32, 3, 0));
  });
  const double narrowGBs = gbPerSecond(6.0 * n, [&] {  // 4 bytes read, 2 written
    CUDA_OK(cuda::castFloat(d.ptr, DataType::kFloat16, a.ptr, DataType::kFloat32, n, 0));
  });
  const double widenGBs = gbPerSecond(6.0 * n, [&] {
    CUDA_OK(cuda::castFloat(d.ptr, DataType::kFloat32, a.ptr, DataType::kBFloat16, n, 0));
  });
  // Pack and unpack 400 MB as 100 tensors of 4 MB and as 10,000 tensors of 40 KB.
  for (int tensors : {100, 10000}) {
    const size_t each = n * 4 / tensors;
    std::vector<cuda::PackEntry> entries(tensors);
    for (int t = 0; t < tensors; ++t) entries[t] = {a.bytes() + t * each, t * each, each};
    DeviceBuffer table(sizeof(cuda::PackEntry) * tensors);
    CUDA_OK(cudaMemcpy(table.ptr, entries.data(), sizeof(cuda::PackEntry) * tensors,
                       cudaMemcpyHostToDevice));
    auto* device = static_cast<cuda::PackEntry*>(table.ptr);
    const double packGBs = gbPerSecond(2.0 * n * 4, [&] { CUDA_OK(cuda::pack(d.ptr, device, tensors, each, 0)); });
    const double unpackGBs =
        gbPerSecond(2.0 * n * 4, [&] { CUDA_OK(cuda::unpack(d.ptr, device, tensors, each, 0)); });
    const std::string what = std::to_string(tensors) + " tensors of " + std::to_string(each / 1000) + " KB";
    printShare(("pack " + what).c_str(), packGBs, copyGBs);
    printShare(("unpack " + what).c_str(), unpackGBs, copyGBs);
  }
  LarsParams p;
  DeviceBuffer scratch(cuda::larsScratchBytes(n)), ratio(4);
  const double larsGBs = gbPerSecond(7.0 * n * 4, [&] {  // norms: 2 reads; update: 3 reads, 2 writes
    CUDA_OK(cuda::larsUpdate(static_cast<float*>(d.ptr), static_cast<float*>(a.ptr), static_cast<float*>(b.ptr), n,
                             0.1f, p, scratch.ptr, static_cast<float*>(ratio.ptr), 0));
  });
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s\n", prop.name);
  std::printf("copy bandwidth (cudaMemcpy device to device, 400 MB, read + write): %.1f GB/s\n", copyGBs);
  printShare("reduce float32 sum, 10^8 elements (target >= 85%)", reduceGBs, copyGBs);
  printShare("reduce float16 sum, 2x10^8 elements", halfGBs, copyGBs);
  printShare("mean float32 last step over 3 ranks, 10^8 elements", meanGBs, copyGBs);
  printShare("cast float32 -> float16, 10^8 elements", narrowGBs, copyGBs);
  printShare("cast bfloat16 -> float32, 10^8 elements", widenGBs, copyGBs);
  printShare("LARS float32 update, 10^8 elements (effective)", larsGBs, copyGBs);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: nothing to run\n");
    return 3;
  }
  const DataType types[] = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64,
                            DataType::kInt32,   DataType::kInt64,    DataType::kUint8};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
  std::vector<size_t> sizes = {0, 1, 4099};
  if (!quick) sizes.push_back(100000000);
  for (size_t count : sizes) {
    for (size_t offset : {size_t(0), size_t(1)}) {
      for (DataType type : types) {
        for (ReduceOp op : ops) checkReduce(type, op, count, offset);
        checkMean(type, count, offset);
      }
      checkCast(DataType::kFloat16, count, offset);
      checkCast(DataType::kBFloat16, count, offset);
    }
    std::printf("size %zu done (%d checks, %d failed)\n", count, checks, failures);
    std::fflush(stdout);
  }
  checkNanMinMax();
  checkMeanRoundsOnce();
  checkPack(1, 11);
  checkPack(1000, 12);
  std::vector<size_t> larsSizes = {1, 4099, 70000};
  if (!quick) larsSizes.push_back(100000000);
  for (size_t n : larsSizes) {
    LarsParams p;
    p.weightDecay = 1e-4;
    checkLars<float>(n, p, false, "plain");
    checkLars<Half>(n, p, false, "plain");
    p.nesterov = true;
    checkLars<float>(n, p, false, "nesterov");
    checkLars<Half>(n, p, false, "nesterov");
    p.adapt = false;
    checkLars<float>(n, p, false, "excluded");
    p.adapt = true;
    checkLars<float>(n, p, true, "zero weights");
  }
  if (!quick) bandwidth();
  std::printf("%d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
