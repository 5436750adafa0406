// Small allreduces gathered with the request check (algorithms/allreduce_gathered.h over
// algorithms/allgather_framed.h): every dtype and op on both sides of the size cut, ranks
// bit-identical, and ranks that disagree (also about which side of the cut they are on) failing
// together and staying in step.
#include <chrono>
#include <thread>

#include "algorithms/allgather_framed.h"
#include "algorithms/allreduce_gathered.h"
#include "tests/ring_helpers.h"

using namespace tfring;
using namespace tfring_test;

namespace {

// One allreduce of `count` elements of `type` through the engine, packed as two tensors.
Status allreduceTyped(Engine& e, std::vector<uint8_t>* data, size_t count, DataType type, ReduceOp op) {
  const size_t elem = dataTypeSize(type), first = count / 3;
  Request r;
  r.kind = OpKind::kAllreduce;
  r.name = "typed";
  r.type = type;
  r.op = op;
  r.tensors.push_back({data->data(), data->data(), first * elem, {static_cast<int64_t>(first)}});
  r.tensors.push_back({data->data() + first * elem, data->data() + first * elem, (count - first) * elem,
                       {static_cast<int64_t>(count - first)}});
  return call(e, std::move(r));
}

}  // namespace

SWEEP(gathered_allreduce_every_dtype_and_op_across_the_cut) {
  for (int size : {2, 3, 4}) {
    for (const Mode& m : allModes()) {
      std::vector<std::vector<uint8_t>> results(size);  // every output of a rank, one after another
      withEngines(size, m, [&](int rank, Engine& e) {
        for (DataType type : kTypes) {
          const size_t elem = dataTypeSize(type), cut = kGatheredAllreduceBudget / (size - 1) / elem;
          for (size_t count : {size_t{0}, size_t{1}, size_t{7}, cut - 1, cut, cut + 1}) {
            for (ReduceOp op : kOps) {
              std::vector<uint8_t> data(count * elem);
              for (size_t i = 0; i < count; ++i) setElem(data.data(), i, type, inputValue(rank, i, op));
              Status s = allreduceTyped(e, &data, count, type, op);
              if (!s.ok()) throw Failure(s.message);
              const std::string bad = mismatch(data, size, count, type, op);
              if (!bad.empty()) throw Failure(std::string(m.label) + " size " + std::to_string(size) + ": " + bad);
              results[rank].insert(results[rank].end(), data.begin(), data.end());
            }
          }
        }
      });
      for (int r = 1; r < size; ++r) CHECK(results[r] == results[0]);
    }
  }
}

TEST(gathered_mean_rounds_once) {
  // In rank order on one thread (every rank runs this), over pieces, then through the engine.
  for (int size : {2, 3}) {
    for (DataType type : kMeanRoundingTypes) {
      const size_t elem = dataTypeSize(type), count = 7;
      std::vector<std::vector<uint8_t>> inputs(size, std::vector<uint8_t>(count * elem));
      std::vector<const uint8_t*> blocks;
      for (int r = 0; r < size; ++r) {
        for (size_t i = 0; i < count; ++i) setElem(inputs[r].data(), i, type, meanRoundingInput(type, size, r, i));
        blocks.push_back(inputs[r].data());
      }
      std::vector<uint8_t> out(count * elem);
      reduceInRankOrder(blocks, splitPieces(out.data(), count, elem), type, ReduceOp::kMean);
      const std::string bad = meanRoundingMismatch(out.data(), count, type, size);
      if (!bad.empty()) throw Failure("reduceInRankOrder: " + bad);
    }
    withEngines(size, allModes()[0], [&](int rank, Engine& e) {
      for (DataType type : kMeanRoundingTypes) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{100}}) {
          std::vector<uint8_t> data(count * dataTypeSize(type));
          for (size_t i = 0; i < count; ++i) setElem(data.data(), i, type, meanRoundingInput(type, size, rank, i));
          Status s = allreduceTyped(e, &data, count, type, ReduceOp::kMean);
          if (!s.ok()) throw Failure(s.message);
          const std::string bad = meanRoundingMismatch(data.data(), count, type, size);
          if (!bad.empty()) throw Failure("engine: " + bad);
        }
      }
    });
  }
}

TEST(gathered_allreduce_of_noise_is_bit_identical_and_in_rank_order) {
  // Sums of random floats depend on the order of the additions: every rank must use the same one.
  const int size = 4;
  std::vector<std::vector<float>> inputs(size, std::vector<float>(1000)), results(size);
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < 1000; ++i) inputs[r][i] = std::sin(static_cast<float>(r * 1000 + i)) * 1e3f / (r + 1);
  }
  withEngines(size, allModes()[3], [&](int rank, Engine& e) {
    results[rank] = inputs[rank];
    std::vector<std::vector<float>> ts = {results[rank]};
    CHECK(call(e, allreduceOf(ts)).ok());
    results[rank] = ts[0];
  });
  for (size_t i = 0; i < 1000; ++i) {
    float want = inputs[0][i];
    for (int r = 1; r < size; ++r) want += inputs[r][i];
    CHECK_EQ(std::memcmp(&results[0][i], &want, sizeof(float)), 0);
  }
  for (int r = 1; r < size; ++r) CHECK(results[r] == results[0]);
}

TEST(gathered_and_ring_sides_of_a_mismatch_fail_together_and_recover) {
  for (const Mode& m : allModes()) {
    withEngines(3, m, [&](int rank, Engine& e) {
      // Rank 1's tensor is above the cut (ring allreduce), the others' below (gathered).
      std::vector<std::vector<float>> ts = {std::vector<float>(rank == 1 ? 100000 : 8, 1.0f)};
      Status s = call(e, allreduceOf(ts));
      CHECK(s.code == Code::kFailedPrecondition);
      CHECK(s.message.find("tensor 0 has shape [8] on rank 0 but [100000] on rank 1") != std::string::npos);
      std::vector<std::vector<float>> good = {std::vector<float>(5, 1.0f), std::vector<float>(70000, 2.0f)};
      CHECK(call(e, allreduceOf(good)).ok());
      CHECK_EQ(good[0][4], 3.0f);
      CHECK_EQ(good[1][69999], 6.0f);
    });
  }
}

TEST(framed_allgather_carries_payloads_of_any_length) {
  for (const Mode& m : allModes()) {
    withRing(3, m, [&](int rank, Transport* t, const Config&) {
      const size_t lengths[] = {0, 1, 70000};  // rank r sends lengths[r] bytes of value r + 1
      std::vector<uint8_t> mine(lengths[rank], static_cast<uint8_t>(rank + 1));
      auto blocks = ringAllgatherFramed(t, 3, {static_cast<uint8_t>(10 + rank)}, {{mine.data(), mine.size()}},
                                        1 << 20, Deadline::after(10));
      for (int k = 0; k < 3; ++k) {
        CHECK_EQ(int(blocks[k].tag.at(0)), 10 + k);
        if (k == rank) continue;
        CHECK_EQ(blocks[k].payload.size(), lengths[k]);
        for (uint8_t v : blocks[k].payload) CHECK_EQ(int(v), k + 1);
      }
    });
  }
}

TEST(framed_allgather_refuses_a_block_over_the_limit) {
  withRing(2, allModes()[0], [&](int rank, Transport* t, const Config&) {
    std::vector<uint8_t> mine(rank == 1 ? 100 : 1);
    if (rank == 0) {
      CHECK_THROWS(ringAllgatherFramed(t, 2, {}, {{mine.data(), mine.size()}}, 10, Deadline::after(10)),
                   "the data from rank 1 is corrupt (a block of 100 bytes where at most 10 are allowed)");
    } else {
      ringAllgatherFramed(t, 2, {}, {{mine.data(), mine.size()}}, 1000, Deadline::after(10));
    }
  });
}

TEST(barrier_waits_for_the_last_rank) {
  // The barrier is the check's exchange alone: no rank may leave it before the last one entered.
  withEngines(3, allModes()[3], [&](int rank, Engine& e) {
    if (rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto start = std::chrono::steady_clock::now();
    Request b;
    b.kind = OpKind::kBarrier;
    b.name = "barrier";
    CHECK(call(e, std::move(b)).ok());
    if (rank != 2) CHECK(std::chrono::steady_clock::now() - start > std::chrono::milliseconds(250));
  });
}
