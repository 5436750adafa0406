// Adasum (algorithms/allreduce_adasum.h): the pair rule's limits (orthogonal: the sum, parallel:
// the mean, zero: the other), the engine on 2 and 4 ranks against a long-double reference for
// every floating type, per tensor, bit-identical ranks, and the refusals (3 ranks, integers,
// reduce-scatter) failing every rank alike and leaving the engine usable.
#include <cmath>

#include "algorithms/allreduce_adasum.h"
#include "tests/ring_helpers.h"

using namespace tfring;
using namespace tfring_test;

namespace {

const DataType kFloatTypes[] = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};

// adasum(a, b) in long double, without rounding: the formula as the paper writes it.
std::vector<long double> pairReference(const std::vector<long double>& a, const std::vector<long double>& b) {
  long double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const long double ca = aa > 0 ? 1 - dot / (2 * aa) : 1, cb = bb > 0 ? 1 - dot / (2 * bb) : 1;
  std::vector<long double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// The ranks' vectors combined as ((0, 1), (2, 3)), ...: recursive doubling.
std::vector<long double> treeReference(std::vector<std::vector<long double>> ranks) {
  for (size_t level = 1; level < ranks.size(); level *= 2) {
    for (size_t lower = 0; lower < ranks.size(); lower += 2 * level) {
      ranks[lower] = pairReference(ranks[lower], ranks[lower + level]);
    }
  }
  return ranks[0];
}

// A rank's element i of tensor t: different directions on every rank, some shared component.
double gradientValue(int rank, int t, size_t i) {
  return std::sin(0.7 * i + 1.3 * t) + 0.6 * std::cos(0.37 * i * (rank + 1) + rank);
}

const size_t kCounts[] = {5, 0, 300};  // three tensors of one request, one of them empty

// One Adasum allreduce of the three tensors through `e`, in place; *all holds them packed.
Status adasumOf(Engine& e, std::vector<uint8_t>* all, DataType type) {
  const size_t elem = dataTypeSize(type);
  Request r;
  r.kind = OpKind::kAllreduce;
  r.name = "adasum";
  r.type = type;
  r.op = ReduceOp::kAdasum;
  size_t at = 0;
  for (size_t count : kCounts) {
    r.tensors.push_back({all->data() + at, all->data() + at, count * elem, {static_cast<int64_t>(count)}});
    at += count * elem;
  }
  return call(e, std::move(r));
}

double relativeTolerance(DataType t) {
  if (t == DataType::kFloat16) return 4e-3;
  if (t == DataType::kBFloat16) return 3e-2;
  if (t == DataType::kFloat32) return 1e-6;
  return 1e-13;
}

std::vector<double> pairOf(std::vector<double> a, const std::vector<double>& b) {
  adasumPair(a.data(), b.data(), a.size(), DataType::kFloat64);
  return a;
}

}  // namespace

TEST(adasum_pair_sums_orthogonal_vectors_averages_parallel_ones_and_passes_a_zero_one) {
  CHECK(pairOf({3, 0, 0}, {0, 4, 0}) == (std::vector<double>{3, 4, 0}));
  CHECK(pairOf({1, 2, 3}, {1, 2, 3}) == (std::vector<double>{1, 2, 3}));
  CHECK(pairOf({1, 2}, {2, 4}) == (std::vector<double>{1.5, 3}));  // parallel: the mean
  CHECK(pairOf({0, 0}, {5, -1}) == (std::vector<double>{5, -1}));
  CHECK(pairOf({5, -1}, {0, 0}) == (std::vector<double>{5, -1}));
  CHECK(pairOf({1, 0}, {-1, 0}) == (std::vector<double>{0, 0}));  // opposite: they cancel, as the mean does
}

TEST(adasum_on_2_and_4_ranks_matches_the_reference_per_tensor_and_ranks_agree_bitwise) {
  for (int size : {2, 4}) {
    for (DataType type : kFloatTypes) {
      const size_t elem = dataTypeSize(type);
      std::vector<std::vector<uint8_t>> results(size);
      withEngines(size, allModes()[size == 4 ? 3 : 0], [&](int rank, Engine& e) {
        std::vector<uint8_t> all;
        for (int t = 0; t < 3; ++t) {
          std::vector<uint8_t> one(kCounts[t] * elem);
          for (size_t i = 0; i < kCounts[t]; ++i) setElem(one.data(), i, type, gradientValue(rank, t, i));
          all.insert(all.end(), one.begin(), one.end());
        }
        Status s = adasumOf(e, &all, type);
        if (!s.ok()) throw Failure(s.message);
        results[rank] = all;
      });
      for (int r = 1; r < size; ++r) CHECK(results[r] == results[0]);
      size_t at = 0;
      for (int t = 0; t < 3; ++t) {  // each tensor against the reference of that tensor alone
        std::vector<std::vector<long double>> inputs(size);
        for (int r = 0; r < size; ++r) {
          for (size_t i = 0; i < kCounts[t]; ++i) {
            // The reference starts from the inputs as the type holds them.
            std::vector<uint8_t> held(elem);
            setElem(held.data(), 0, type, gradientValue(r, t, i));
            inputs[r].push_back(getElem(held.data(), 0, type));
          }
        }
        const std::vector<long double> want = treeReference(inputs);
        long double scale = 0;
        for (long double w : want) scale = std::max(scale, std::fabs(w));
        for (size_t i = 0; i < kCounts[t]; ++i) {
          const double got = getElem(results[0].data() + at, i, type);
          if (std::fabs(got - want[i]) > relativeTolerance(type) * scale * size) {
            throw Failure(std::string(dataTypeName(type)) + " size " + std::to_string(size) + " tensor " +
                          std::to_string(t) + " index " + std::to_string(i) + ": got " + std::to_string(got) +
                          " want " + std::to_string(static_cast<double>(want[i])));
          }
        }
        at += kCounts[t] * elem;
      }
    }
  }
}

TEST(adasum_of_a_large_request_is_not_limited_to_the_gathered_budget) {
  const size_t count = 100000;  // 400 KB: far above the gathered allreduce's cut
  withEngines(2, allModes()[1], [&](int rank, Engine& e) {
    std::vector<std::vector<float>> ts = {std::vector<float>(count, 0.0f)};
    ts[0][rank] = 2.0f;  // orthogonal unit directions: the sum
    Request r = allreduceOf(ts, ReduceOp::kAdasum);
    r.type = DataType::kFloat32;
    CHECK(call(e, std::move(r)).ok());
    CHECK_EQ(ts[0][0], 2.0f);
    CHECK_EQ(ts[0][1], 2.0f);
    CHECK_EQ(ts[0][2], 0.0f);
  });
}

TEST(adasum_refuses_3_ranks_integers_and_reduce_scatter_on_every_rank_and_the_engine_goes_on) {
  withEngines(3, allModes()[0], [&](int, Engine& e) {
    std::vector<std::vector<float>> ts = {std::vector<float>(4, 1.0f)};
    Status s = call(e, allreduceOf(ts, ReduceOp::kAdasum));
    CHECK(s.code == Code::kInvalidArgument);
    CHECK(s.message.find("needs a power of two of them (1, 2, 4, 8, ...), not 3") != std::string::npos);
    CHECK(call(e, allreduceOf(ts)).ok());
    CHECK_EQ(ts[0][3], 3.0f);
  });
  withEngines(2, allModes()[0], [&](int, Engine& e) {
    std::vector<int32_t> ints(4, 1);
    Request r;
    r.kind = OpKind::kAllreduce;
    r.name = "counts";
    r.type = DataType::kInt32;
    r.op = ReduceOp::kAdasum;
    r.tensors.push_back({ints.data(), ints.data(), 16, {4}});
    Status s = call(e, std::move(r));
    CHECK(s.code == Code::kInvalidArgument);
    CHECK(s.message.find("floating-point tensors (float16, bfloat16, float32, float64), not int32") !=
          std::string::npos);
    std::vector<float> rows(4, 1.0f), mine(2);
    Request rs;
    rs.kind = OpKind::kReducescatter;
    rs.name = "rows";
    rs.op = ReduceOp::kAdasum;
    rs.tensors.push_back({rows.data(), mine.data(), 16, {4}});
    s = call(e, std::move(rs));
    CHECK(s.code == Code::kInvalidArgument);
    CHECK(s.message.find("only the allreduce takes it") != std::string::npos);
    std::vector<std::vector<float>> ts = {std::vector<float>(4, 1.0f)};
    CHECK(call(e, allreduceOf(ts)).ok());
    CHECK_EQ(ts[0][0], 2.0f);
  });
}

TEST(adasum_on_one_rank_and_sum_on_another_fail_together) {
  withEngines(2, allModes()[0], [&](int rank, Engine& e) {
    std::vector<std::vector<float>> ts = {std::vector<float>(4, 1.0f)};
    Status s = call(e, allreduceOf(ts, rank == 0 ? ReduceOp::kAdasum : ReduceOp::kSum));
    CHECK(s.code == Code::kFailedPrecondition);
    CHECK(s.message.find("adasum") != std::string::npos);
    CHECK(call(e, allreduceOf(ts, ReduceOp::kAdasum)).ok());
    CHECK_EQ(ts[0][0], 1.0f);  // parallel (equal): the mean
  });
}
