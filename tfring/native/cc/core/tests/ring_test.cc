// Every algorithm x transport x rank count x element count x dtype x reduce op, on thread-ranks.
#include <numeric>

#include "algorithms/allgather_ring.h"
#include "algorithms/allreduce_ring.h"
#include "algorithms/broadcast_ring.h"
#include "tests/ring_helpers.h"

using namespace tfring;
using namespace tfring_test;

namespace {

void checkAllreduce(int rank, Transport* t, int size, DataType type, ReduceOp op, size_t count,
                    bool inPlace) {
  const size_t elem = dataTypeSize(type);
  std::vector<uint8_t> in(count * elem + 1), out(count * elem + 1);
  for (size_t i = 0; i < count; ++i) setElem(in.data(), i, type, inputValue(rank, i, op));
  void* dst = inPlace ? in.data() : out.data();
  ringAllreduce(t, size, {{in.data(), count * elem}}, {{dst, count * elem}}, type, op, Deadline::after(30));
  std::vector<uint8_t> got(static_cast<uint8_t*>(dst), static_cast<uint8_t*>(dst) + count * elem);
  const std::string bad = mismatch(got, size, count, type, op);
  if (!bad.empty()) throw Failure(bad);
}

// MEAN over `size` ranks of meanRoundingInputs, split into pieces: exactly meanRoundedOnce.
void checkMeanRoundsOnce(int rank, Transport* t, int size, DataType type, size_t count, bool inPlace) {
  const size_t elem = dataTypeSize(type);
  std::vector<uint8_t> in(count * elem + 1), out(count * elem + 1);
  for (size_t i = 0; i < count; ++i) setElem(in.data(), i, type, meanRoundingInput(type, size, rank, i));
  uint8_t* dst = inPlace ? in.data() : out.data();
  ringAllreduce(t, size, splitPieces(in.data(), count, elem), splitPieces(dst, count, elem), type,
                ReduceOp::kMean, Deadline::after(30));
  const std::string bad = meanRoundingMismatch(dst, count, type, size);
  if (!bad.empty()) throw Failure(bad);
}

}  // namespace

SWEEP(ring_mean_rounds_once) {
  // 1000003 elements cross the 1 MiB pieces in which a segment arrives to be reduced.
  for (const Mode& m : allModes()) {
    for (int size : {2, 3}) {
      withRing(size, m, [&](int rank, Transport* t, const Config&) {
        for (DataType type : kMeanRoundingTypes) {
          for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000003}}) {
            checkMeanRoundsOnce(rank, t, size, type, count, count % 2 == 1);
          }
        }
      });
    }
  }
}

SWEEP(allreduce_every_dtype_op_size_transport) {
  for (const Mode& m : allModes()) {
    for (int size : {1, 2, 3, 4}) {
      withRing(size, m, [&](int rank, Transport* t, const Config&) {
        for (DataType type : kTypes) {
          for (ReduceOp op : kOps) {
            for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}, size_t{100003}}) {
              checkAllreduce(rank, t, size, type, op, count, count % 2 == 1);
            }
          }
        }
      });
    }
  }
}

SWEEP(allreduce_ten_million_floats) {
  for (const Mode& m : allModes()) {
    withRing(2, m, [&](int rank, Transport* t, const Config&) {
      checkAllreduce(rank, t, 2, DataType::kFloat32, ReduceOp::kSum, 10000000, false);
    });
  }
}

TEST(allreduce_many_pieces_in_place_and_not) {
  // 1000 tensors of mixed sizes as one IoList: segments straddle tensor boundaries.
  for (const Mode& m : allModes()) {
    withRing(3, m, [&](int rank, Transport* t, const Config&) {
      std::vector<std::vector<float>> in(1000), out(1000);
      IoList inList, outList;
      for (size_t k = 0; k < in.size(); ++k) {
        in[k].resize(1 + (k * 37) % 300);
        out[k].resize(in[k].size());
        for (size_t i = 0; i < in[k].size(); ++i) in[k][i] = static_cast<float>(rank * 1000 + k + i);
        inList.push_back({in[k].data(), in[k].size() * 4});
        // Even tensors in place, odd ones into a separate output.
        outList.push_back({k % 2 ? out[k].data() : in[k].data(), in[k].size() * 4});
      }
      ringAllreduce(t, 3, inList, outList, DataType::kFloat32, ReduceOp::kSum, Deadline::after(30));
      for (size_t k = 0; k < in.size(); ++k) {
        const float* got = static_cast<const float*>(outList[k].iov_base);
        for (size_t i = 0; i < in[k].size(); ++i) {
          CHECK_EQ(got[i], static_cast<float>(3000 + 3 * (k + i)));
        }
      }
    });
  }
}

SWEEP(broadcast_every_root_and_size) {
  for (const Mode& m : allModes()) {
    for (int size : {1, 2, 3, 4}) {
      withRing(size, m, [&](int rank, Transport* t, const Config&) {
        for (int root = 0; root < size; ++root) {
          for (size_t bytes : {size_t{0}, size_t{1}, size_t{4099}, size_t{9} << 20}) {
            std::vector<uint8_t> a(bytes / 2), b(bytes - bytes / 2);
            for (size_t i = 0; i < a.size(); ++i) a[i] = rank == root ? uint8_t(i * 7 + root) : 0;
            for (size_t i = 0; i < b.size(); ++i) b[i] = rank == root ? uint8_t(i * 3 + 1) : 0;
            ringBroadcast(t, size, root, {{a.data(), a.size()}, {b.data(), b.size()}}, Deadline::after(30));
            for (size_t i = 0; i < a.size(); ++i) CHECK_EQ(a[i], uint8_t(i * 7 + root));
            for (size_t i = 0; i < b.size(); ++i) CHECK_EQ(b[i], uint8_t(i * 3 + 1));
          }
        }
      });
    }
  }
}

TEST(allgather_blocks_of_different_sizes) {
  for (const Mode& m : allModes()) {
    for (int size : {1, 2, 3, 4}) {
      withRing(size, m, [&](int rank, Transport* t, const Config&) {
        // Rank r contributes r * 1000 bytes (rank 0 none).
        std::vector<size_t> blocks(size);
        for (int r = 0; r < size; ++r) blocks[r] = static_cast<size_t>(r) * 1000;
        size_t total = std::accumulate(blocks.begin(), blocks.end(), size_t{0});
        size_t mine = std::accumulate(blocks.begin(), blocks.begin() + rank, size_t{0});
        std::vector<uint8_t> out(total);
        for (size_t i = 0; i < blocks[rank]; ++i) out[mine + i] = uint8_t(rank + i);
        ringAllgather(t, size, {{out.data(), total}}, blocks, Deadline::after(30));
        size_t at = 0;
        for (int r = 0; r < size; ++r) {
          for (size_t i = 0; i < blocks[r]; ++i) CHECK_EQ(out[at + i], uint8_t(r + i));
          at += blocks[r];
        }
        auto strings = allgatherStrings(t, size, std::string(rank, 'x'), Deadline::after(30));
        for (int r = 0; r < size; ++r) CHECK_EQ(strings[r], std::string(r, 'x'));
      });
    }
  }
}
