// The ring over GPU tensors (pinned_staging.h), framework-free: PinnedStaging against host
// results for sizes 0, 1, 4099 and 10^8 at unaligned device offsets, in place and not, with pieces
// that cut tensors anywhere; ordering after the producer's stream; the deadline and error paths;
// then the real engine and ring (core/) on 2 and 3 thread-ranks over TCP and shared memory, each
// rank with its own device tensors. bench_staging reports the copy throughput and the overlap.
//
//   .build/staging_test            everything
//   .build/staging_test staging_   without the bandwidth report (as under compute-sanitizer)
#include <cuda_runtime.h>

#include <numeric>

#include "../pinned_staging.h"
#include "engine/engine.h"
#include "tests/ring_helpers.h"

using namespace tfring;
using namespace tfring_test;

namespace {

#define CUDA_CHECK(call) CHECK_EQ(std::string(cudaGetErrorString(call)), std::string("no error"))

// Device memory holding `floats` floats at `shift` floats past a cudaMalloc'd (aligned) start.
struct DeviceFloats {
  char* base = nullptr;
  float* ptr = nullptr;
  size_t count = 0;
  DeviceFloats(size_t floats, size_t shift) : count(floats) {
    CUDA_CHECK(cudaMalloc(&base, (floats + shift) * 4 + 4));
    ptr = reinterpret_cast<float*>(base + shift * 4);
  }
  ~DeviceFloats() { cudaFree(base); }
  void upload(const std::vector<float>& v) { CUDA_CHECK(cudaMemcpy(ptr, v.data(), count * 4, cudaMemcpyHostToDevice)); }
  std::vector<float> download() const {
    std::vector<float> v(count);
    CUDA_CHECK(cudaMemcpy(v.data(), ptr, count * 4, cudaMemcpyDeviceToHost));
    return v;
  }
};

std::vector<float> pattern(size_t n, int seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>((i * 7 + seed) % 1001) - 500);
  return v;
}

// Stages `sizes` (floats per tensor) through PinnedStaging with a host "collective" that adds 1 to
// every float, and checks the outputs, the untouched inputs and the pieces it was handed.
void checkStaged(const std::vector<size_t>& sizes, size_t pieceBytes, bool inPlace, size_t shift) {
  std::vector<std::unique_ptr<DeviceFloats>> ins, outs;
  std::vector<std::vector<float>> host;
  std::vector<cuda::DeviceTensor> tensors;
  for (size_t k = 0; k < sizes.size(); ++k) {
    ins.push_back(std::make_unique<DeviceFloats>(sizes[k], shift));
    host.push_back(pattern(sizes[k], static_cast<int>(k)));
    ins.back()->upload(host.back());
    if (!inPlace) outs.push_back(std::make_unique<DeviceFloats>(sizes[k], shift + 1));
    tensors.push_back({ins[k]->ptr, inPlace ? ins[k]->ptr : outs[k]->ptr, sizes[k] * 4});
  }
  cuda::PinnedStaging staging(pieceBytes);
  std::vector<size_t> pieces;
  staging.run(tensors, 4, nullptr,
              [&](void* data, size_t bytes) {
                pieces.push_back(bytes);
                float* f = static_cast<float*>(data);
                for (size_t i = 0; i < bytes / 4; ++i) f[i] += 1.0f;
              },
              Deadline::after(60));
  const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0}) * 4;
  const size_t piece = pieceBytes / 4 * 4;
  CHECK_EQ(std::accumulate(pieces.begin(), pieces.end(), size_t{0}), total);
  CHECK_EQ(pieces.size(), total == 0 ? size_t{0} : (total + piece - 1) / piece);
  for (size_t k = 0; k + 1 < pieces.size(); ++k) CHECK_EQ(pieces[k], piece);
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<float> got = (inPlace ? ins[k] : outs[k])->download();
    for (size_t i = 0; i < sizes[k]; ++i) {
      if (got[i] != host[k][i] + 1.0f) CHECK_EQ(got[i], host[k][i] + 1.0f);
    }
    if (!inPlace) CHECK(ins[k]->download() == host[k]);
  }
}

// Keeps `stream` busy for about `ms` milliseconds, then writes value + i to data[i]: work queued
// by the "framework" that staging must wait for.
__global__ void spinThenFill(float* data, size_t n, float value, long long cycles) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
  }
  __syncthreads();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] = value + static_cast<float>(i % 1000);
  }
}

long long cyclesFor(double ms) {
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  return static_cast<long long>(ms * khz);
}

}  // namespace

TEST(staging_sizes_offsets_and_pieces) {
  for (size_t shift : {size_t{0}, size_t{1}}) {
    for (bool inPlace : {false, true}) {
      checkStaged({0}, 4096, inPlace, shift);
      checkStaged({1}, 4096, inPlace, shift);
      checkStaged({4099}, 4096, inPlace, shift);                 // 5 pieces, the last short
      checkStaged({1, 4099, 0, 3, (1 << 20) + 7}, 1001, inPlace, shift);  // pieces round down to 1000 bytes
      checkStaged({4099}, 4, inPlace, shift);                    // one element per piece
      checkStaged(std::vector<size_t>(1000, 257), cuda::PinnedStaging::kDefaultPieceBytes, inPlace, shift);
    }
  }
}

TEST(staging_one_hundred_million_floats) {
  checkStaged({100000000}, cuda::PinnedStaging::kDefaultPieceBytes, false, 1);
  checkStaged({100000000}, cuda::PinnedStaging::kDefaultPieceBytes, true, 0);
}

TEST(staging_waits_for_the_producer_stream) {
  // The inputs are written by a kernel still running on the producer stream when run() is called:
  // staging must read what it writes, not what was there before.
  const size_t n = 3 << 20;
  DeviceFloats data(n, 0);
  CUDA_CHECK(cudaMemset(data.ptr, 0, n * 4));
  cudaStream_t producer;
  CUDA_CHECK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  spinThenFill<<<64, 256, 0, producer>>>(data.ptr, n, 5.0f, cyclesFor(100));
  cuda::PinnedStaging staging(1 << 20);
  float firstSeen = -1;
  staging.run({{data.ptr, data.ptr, n * 4}}, 4, producer,
              [&](void* p, size_t) {
                if (firstSeen < 0) firstSeen = static_cast<float*>(p)[0];
              },
              Deadline::after(60));
  CHECK_EQ(firstSeen, 5.0f);
  CHECK_EQ(data.download()[n - 1], 5.0f + static_cast<float>((n - 1) % 1000));
  cudaStreamDestroy(producer);
}

TEST(staging_deadline_and_errors) {
  const size_t n = 1 << 20;
  DeviceFloats data(n, 0);
  cudaStream_t producer;
  CUDA_CHECK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  cuda::PinnedStaging staging(1 << 18);
  // A producer that is still busy when the deadline passes: a clear error, no hang. The error
  // waits (at most 10 s past the deadline) for the copies queued behind the producer, so that
  // the caller may free the tensors at once: the producer has finished when it comes.
  spinThenFill<<<1, 32, 0, producer>>>(data.ptr, n, 1.0f, cyclesFor(1500));
  auto start = Clock::now();
  CHECK_THROWS(staging.run({{data.ptr, data.ptr, n * 4}}, 4, producer, [](void*, size_t) {}, Deadline::after(0.3)),
               "did not finish in time");
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  CHECK(took >= 0.3 && took < 0.3 + 10 + 1);
  CHECK(cudaStreamQuery(producer) == cudaSuccess);
  // The collective's own failure is rethrown once the copies in flight have stopped.
  CHECK_THROWS(staging.run({{data.ptr, data.ptr, n * 4}}, 4, producer,
                           [](void*, size_t) { throw PeerError(1, "rank 1 closed the connection"); },
                           Deadline::after(30)),
               "rank 1 closed");
  // Still usable afterwards.
  int calls = 0;
  staging.run({{data.ptr, data.ptr, n * 4}}, 4, producer, [&](void*, size_t) { ++calls; }, Deadline::after(30));
  CHECK_EQ(calls, static_cast<int>(n * 4 / (1 << 18)));  // one call per 256 KiB piece
  CHECK_THROWS(staging.run({{data.ptr, data.ptr, 6}}, 8, producer, [](void*, size_t) {}, Deadline::after(30)),
               "not a whole number of 8-byte elements");
  cuda::PinnedStaging tiny(4);
  CHECK_THROWS(tiny.run({{data.ptr, data.ptr, 8}}, 8, producer, [](void*, size_t) {}, Deadline::after(30)),
               "at least one element");
  cudaStreamDestroy(producer);
}

TEST(staging_engine_ring_on_gpu_tensors) {
  // The real engine and ring, one GPU shared by the thread-ranks; each rank's tensors are written
  // by a kernel on its own stream, then allreduced (mean) and broadcast through PinnedStaging.
  for (int size : {2, 3}) {
    for (const Mode& m : {allModes()[0], allModes()[1]}) {
      auto store = std::make_shared<HashStore>();
      std::string job = uniqueJob();
      spawn(size, [&](int rank) {
        CUDA_CHECK(cudaSetDevice(0));
        Config c = rankConfig(rank, size, m, job);
        auto ps = std::make_shared<PrefixStore>(job, store);
        Engine engine(c, connectRing(c, *ps), ps);
        cudaStream_t stream;
        CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        cuda::PinnedStaging staging(64 << 10);
        const std::vector<size_t> sizes = {4099, 1, (1 << 20) + 3};
        std::vector<std::unique_ptr<DeviceFloats>> ts;
        Request r;
        r.kind = OpKind::kAllreduce;
        r.name = "gpu-grads";
        r.op = ReduceOp::kMean;
        std::vector<cuda::DeviceTensor> device;
        for (size_t k = 0; k < sizes.size(); ++k) {
          ts.push_back(std::make_unique<DeviceFloats>(sizes[k], k));
          spinThenFill<<<32, 256, 0, stream>>>(ts[k]->ptr, sizes[k], static_cast<float>(10 * (rank + 1)),
                                               cyclesFor(5));
          device.push_back({ts[k]->ptr, ts[k]->ptr, sizes[k] * 4});
          r.tensors.push_back({nullptr, nullptr, sizes[k] * 4, {static_cast<int64_t>(sizes[k])}});
        }
        const Deadline deadline = Deadline::after(60);
        r.staged = [&](const HostCollective& collective) { staging.run(device, 4, stream, collective, deadline); };
        Status s = call(engine, std::move(r));
        CHECK(s.ok());
        const float mean = 10.0f * (size + 1) / 2.0f;
        for (size_t k = 0; k < sizes.size(); ++k) {
          std::vector<float> got = ts[k]->download();
          for (size_t i = 0; i < sizes[k]; i += 97) CHECK_EQ(got[i], mean + static_cast<float>(i % 1000));
          CHECK_EQ(got[sizes[k] - 1], mean + static_cast<float>((sizes[k] - 1) % 1000));
        }
        // Broadcast from rank 1 through the same path.
        DeviceFloats b(300001, 0);
        spinThenFill<<<32, 256, 0, stream>>>(b.ptr, b.count, static_cast<float>(rank), 0);
        Request br;
        br.kind = OpKind::kBroadcast;
        br.name = "gpu-bcast";
        br.root = 1;
        br.tensors.push_back({nullptr, nullptr, b.count * 4, {static_cast<int64_t>(b.count)}});
        br.staged = [&](const HostCollective& collective) {
          staging.run({{b.ptr, b.ptr, b.count * 4}}, 4, stream, collective, deadline);
        };
        CHECK(call(engine, std::move(br)).ok());
        std::vector<float> got = b.download();
        CHECK_EQ(got[0], 1.0f);
        CHECK_EQ(got[300000], 1.0f + static_cast<float>(300000 % 1000));
        cudaStreamDestroy(stream);
        storeBarrier(*ps, "test-end", rank, size, Deadline::after(30));
      });
    }
  }
}

TEST(bench_staging) {
  // Copy throughput of PinnedStaging with an empty collective on 400 MB, against plain
  // device->host->device copies through one pinned buffer without overlap.
  const size_t n = 100000000, bytes = n * 4;
  DeviceFloats data(n, 0);
  CUDA_CHECK(cudaMemset(data.ptr, 0, bytes));
  void* pinned = nullptr;
  CUDA_CHECK(cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault));
  auto seconds = [](auto fn) {
    fn();  // warm-up
    auto start = Clock::now();
    for (int r = 0; r < 5; ++r) fn();
    return std::chrono::duration<double>(Clock::now() - start).count() / 5;
  };
  const double serial = seconds([&] {
    CUDA_CHECK(cudaMemcpy(pinned, data.ptr, bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(data.ptr, pinned, bytes, cudaMemcpyHostToDevice));
  });
  cuda::PinnedStaging staging;
  const double staged = seconds([&] {
    staging.run({{data.ptr, data.ptr, bytes}}, 4, nullptr, [](void*, size_t) {}, Deadline::after(60));
  });
  // With a host step as long as a piece's copy, the overlap hides the copies behind it.
  const double pieceCopy = serial / 2 / (bytes / static_cast<double>(cuda::PinnedStaging::kDefaultPieceBytes));
  const double withWork = seconds([&] {
    staging.run({{data.ptr, data.ptr, bytes}}, 4, nullptr,
                [&](void*, size_t) {
                  auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(pieceCopy));
                  while (Clock::now() < until) {
                  }
                },
                Deadline::after(60));
  });
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s\n", prop.name);
  std::printf("400 MB down and up, one pinned buffer, no overlap: %.1f ms (%.1f GB/s each way)\n", serial * 1e3,
              2 * bytes / serial / 1e9);
  std::printf("PinnedStaging, 4 MiB pieces, empty host step: %.1f ms (%.2fx the plain copies)\n", staged * 1e3,
              serial / staged);
  std::printf("PinnedStaging with a host step as long as one piece's copy (%.0f us): %.1f ms "
              "(no overlap would take %.1f ms)\n",
              pieceCopy * 1e6, withWork * 1e3, (serial + serial / 2) * 1e3);
  cudaFreeHost(pinned);
}
