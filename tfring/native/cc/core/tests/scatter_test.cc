// Reducescatter and alltoall through the engine: Horovod's split of rows, fused lists, every
// reduce op, empty blocks, a rank that sends or receives nothing, and ranks that disagree.
#include <cstdint>

#include "tests/ring_helpers.h"

using namespace tfring;
using namespace tfring_test;

namespace {

// Row i of rank r's tensor k: every element is a small integer, so sums are exact in every type.
double rsValue(int rank, int k, int64_t row, int64_t col) { return (rank + 1) * (k + 2) + row - col; }

// One reducescatter of float tensors shaped [rows_k, cols]; returns each tensor's output.
Status reducescatter(Engine& e, int rank, int size, const std::vector<int64_t>& rows, int64_t cols, ReduceOp op,
                     std::vector<std::vector<float>>* outs) {
  std::vector<std::vector<float>> ins(rows.size());
  outs->assign(rows.size(), {});
  Request r;
  r.kind = OpKind::kReducescatter;
  r.name = "scatter";
  r.op = op;
  for (size_t k = 0; k < rows.size(); ++k) {
    for (int64_t i = 0; i < rows[k]; ++i) {
      for (int64_t j = 0; j < cols; ++j) ins[k].push_back(static_cast<float>(rsValue(rank, k, i, j)));
    }
    (*outs)[k].assign(static_cast<size_t>(reducescatterRows(rows[k], size, rank) * cols), -1.0f);
    r.tensors.push_back({ins[k].data(), (*outs)[k].data(), ins[k].size() * 4, {rows[k], cols}});
  }
  return call(e, std::move(r));
}

double reduced(int size, int k, int64_t row, int64_t col, ReduceOp op) {
  double sum = 0, mx = -1e9;
  for (int q = 0; q < size; ++q) {
    sum += rsValue(q, k, row, col);
    mx = std::max(mx, rsValue(q, k, row, col));
  }
  return op == ReduceOp::kMax ? mx : op == ReduceOp::kMean ? sum / size : sum;
}

}  // namespace

TEST(reducescatter_rows_are_split_as_horovod_splits_them) {
  // 7 rows over 3 ranks: 3, 2, 2. 2 rows over 3 ranks: 1, 1, 0.
  CHECK_EQ(reducescatterRows(7, 3, 0), 3);
  CHECK_EQ(reducescatterRows(7, 3, 2), 2);
  CHECK_EQ(reducescatterFirstRow(7, 3, 2), 5);
  CHECK_EQ(reducescatterRows(2, 3, 2), 0);
  CHECK_EQ(reducescatterFirstRow(2, 3, 2), 2);
}

TEST(reducescatter_of_a_fused_list_on_every_transport_and_op) {
  for (int size : {1, 2, 3, 4}) {
    for (const Mode& m : allModes()) {
      if (size == 1 && m.ranksPerHost) continue;
      withEngines(size, m, [&](int rank, Engine& e) {
        // Even, uneven, fewer rows than ranks, and empty.
        const std::vector<int64_t> rows = {8, 7, 2, 0, 1};
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
          std::vector<std::vector<float>> outs;
          CHECK(reducescatter(e, rank, size, rows, 3, op, &outs).ok());
          for (size_t k = 0; k < rows.size(); ++k) {
            const int64_t first = reducescatterFirstRow(rows[k], size, rank);
            for (int64_t i = 0; i < reducescatterRows(rows[k], size, rank); ++i) {
              for (int64_t j = 0; j < 3; ++j) {
                CHECK_EQ(outs[k][i * 3 + j], static_cast<float>(reduced(size, k, first + i, j, op)));
              }
            }
          }
        }
      });
    }
  }
}

TEST(reducescatter_of_ranks_that_disagree_fails_every_rank_and_recovers) {
  withEngines(3, allModes()[0], [&](int rank, Engine& e) {
    std::vector<std::vector<float>> outs;
    Status s = reducescatter(e, rank, 3, {rank == 1 ? int64_t{5} : int64_t{6}}, 2, ReduceOp::kSum, &outs);
    CHECK(s.code == Code::kFailedPrecondition);
    CHECK(s.message.find("tensor 0 has shape [6, 2] on rank 0 but [5, 2] on rank 1") != std::string::npos);
    CHECK(reducescatter(e, rank, 3, {6}, 2, ReduceOp::kSum, &outs).ok());
  });
}

namespace {

// One reducescatter to owners of float tensors shaped [rows_k, cols]; outs[k] is tensor k's
// reduction where this rank owns it, untouched (empty) elsewhere. `inPlace`: owned tensors are
// reduced in their input's memory (as a TF kernel forwards its input).
Status reduceToOwners(Engine& e, int rank, const std::vector<int64_t>& rows, int64_t cols,
                      const std::vector<int>& owners, ReduceOp op, std::vector<std::vector<float>>* outs,
                      bool inPlace = false) {
  std::vector<std::vector<float>> ins(rows.size());
  outs->assign(rows.size(), {});
  Request r;
  r.kind = OpKind::kReducescatter;
  r.name = "to owners";
  r.op = op;
  r.owners = owners;
  for (size_t k = 0; k < rows.size(); ++k) {
    for (int64_t i = 0; i < rows[k]; ++i) {
      for (int64_t j = 0; j < cols; ++j) ins[k].push_back(static_cast<float>(rsValue(rank, k, i, j)));
    }
    if (owners[k] == rank) (*outs)[k].assign(ins[k].size(), -1.0f);
    float* out = owners[k] != rank ? nullptr : inPlace ? ins[k].data() : (*outs)[k].data();
    r.tensors.push_back({ins[k].data(), out, ins[k].size() * 4, {rows[k], cols}});
  }
  Status s = call(e, std::move(r));
  if (inPlace) {
    for (size_t k = 0; k < rows.size(); ++k) {
      if (owners[k] == rank) (*outs)[k] = ins[k];
    }
  }
  return s;
}

}  // namespace

TEST(reducescatter_to_owners_gives_each_tensor_whole_to_its_owner) {
  for (int size : {1, 2, 3, 4}) {
    for (const Mode& m : allModes()) {
      if (size == 1 && m.ranksPerHost) continue;
      withEngines(size, m, [&](int rank, Engine& e) {
        // Owners out of order, a rank with nothing (the last, on 4), an empty tensor, a big one.
        const std::vector<int64_t> rows = {8, 7, 2, 0, 1, 30000};
        const int owning = size == 4 ? 3 : size;  // on 4 ranks the last owns nothing
        std::vector<int> owners;
        for (size_t k = 0; k < rows.size(); ++k) owners.push_back(static_cast<int>((k * 5 + 1) % owning));
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
          std::vector<std::vector<float>> outs;
          CHECK(reduceToOwners(e, rank, rows, 3, owners, op, &outs, op == ReduceOp::kMean).ok());
          for (size_t k = 0; k < rows.size(); ++k) {
            if (owners[k] != rank) continue;
            for (int64_t i = 0; i < rows[k]; i += 1 + i / 7) {
              for (int64_t j = 0; j < 3; ++j) CHECK_EQ(outs[k][i * 3 + j], static_cast<float>(reduced(size, k, i, j, op)));
            }
          }
        }
      });
    }
  }
}

TEST(reducescatter_to_owners_of_ranks_that_disagree_or_bad_owners_fails_clearly_and_recovers) {
  withEngines(3, allModes()[0], [&](int rank, Engine& e) {
    std::vector<std::vector<float>> outs;
    Status s = reduceToOwners(e, rank, {4, 4}, 2, {0, rank == 2 ? 1 : 2}, ReduceOp::kSum, &outs);
    CHECK(s.code == Code::kFailedPrecondition);
    CHECK(s.message.find("gave the tensors the owners: 0 2 but rank 2 the owners: 0 1") != std::string::npos);
    s = reduceToOwners(e, rank, {4}, 2, {3}, ReduceOp::kSum, &outs);
    CHECK(s.code == Code::kInvalidArgument);
    CHECK(s.message.find("owner 3 is not a rank of this ring of 3") != std::string::npos);
    CHECK(reduceToOwners(e, rank, {4, 4}, 2, {2, 0}, ReduceOp::kSum, &outs).ok());
  });
}

namespace {

// Rank o's alltoall input for the splits given: the rows for rank d hold o * 100 + d * 10 + row.
std::vector<int32_t> alltoallInput(int o, const std::vector<int64_t>& splits, int64_t cols) {
  std::vector<int32_t> in;
  for (size_t d = 0; d < splits.size(); ++d) {
    for (int64_t i = 0; i < splits[d]; ++i) {
      for (int64_t j = 0; j < cols; ++j) in.push_back(static_cast<int32_t>(o * 100 + d * 10 + i));
    }
  }
  return in;
}

// `rows` < 0: the sum of the splits.
Status alltoall(Engine& e, std::vector<int32_t>& in, const std::vector<int64_t>& splits, int64_t cols,
                std::vector<int32_t>* out, std::vector<int64_t>* received, int64_t rows = -1) {
  Request r;
  r.kind = OpKind::kAlltoall;
  r.name = "route";
  r.type = DataType::kInt32;
  r.splits = splits;
  if (rows < 0) {
    rows = 0;
    for (int64_t s : splits) rows += s;
  }
  r.tensors.push_back({in.data(), nullptr, in.size() * 4, {rows, cols}});
  r.allocate = [out, received, cols](const std::vector<int64_t>& from, std::string*) -> void* {
    *received = from;
    int64_t total = 0;
    for (int64_t f : from) total += f;
    out->assign(static_cast<size_t>(total * cols), -1);
    return out->data();
  };
  return call(e, std::move(r));
}

// What rank o sends rank d in these tests: uneven, with a rank that sends nothing (rank 1 to
// everyone) and one that receives nothing (rank 2, from everyone).
int64_t alltoallRows(int o, int d) { return o == 1 || d == 2 ? 0 : 1 + (o + 2 * d) % 3; }

}  // namespace

TEST(alltoall_delivers_every_block_in_origin_order_on_every_transport) {
  for (int size : {1, 2, 3, 4}) {
    for (const Mode& m : allModes()) {
      if (size == 1 && m.ranksPerHost) continue;
      withEngines(size, m, [&](int rank, Engine& e) {
        std::vector<int64_t> splits;
        for (int d = 0; d < size; ++d) splits.push_back(alltoallRows(rank, d));
        std::vector<int32_t> in = alltoallInput(rank, splits, 2), out;
        std::vector<int64_t> received;
        CHECK(alltoall(e, in, splits, 2, &out, &received).ok());
        size_t at = 0;
        for (int o = 0; o < size; ++o) {
          CHECK_EQ(received[o], alltoallRows(o, rank));
          for (int64_t i = 0; i < alltoallRows(o, rank); ++i) {
            for (int j = 0; j < 2; ++j) CHECK_EQ(out[at++], static_cast<int32_t>(o * 100 + rank * 10 + i));
          }
        }
        CHECK_EQ(at, out.size());
      });
    }
  }
}

TEST(alltoall_of_ranks_that_disagree_or_bad_splits_fails_clearly) {
  withEngines(2, allModes()[1], [&](int rank, Engine& e) {
    // Rows of different widths: every rank fails, naming the shapes.
    std::vector<int64_t> splits = {1, 1};
    std::vector<int32_t> in(static_cast<size_t>(2 * (2 + rank))), out;
    std::vector<int64_t> received;
    Status s = alltoall(e, in, splits, 2 + rank, &out, &received);
    CHECK(s.code == Code::kFailedPrecondition);
    CHECK(s.message.find("has shape [*, 2] on rank 0 but [*, 3] on rank 1") != std::string::npos);
    // Splits that do not add up fail on the rank that passed them, before any exchange; here every rank does.
    in.assign(4, 0);
    s = alltoall(e, in, {1, 2}, 2, &out, &received, 2);
    CHECK(s.code == Code::kInvalidArgument);
    CHECK(s.message.find("do not add up") != std::string::npos);
    in = alltoallInput(rank, {1, 1}, 2);
    CHECK(alltoall(e, in, {1, 1}, 2, &out, &received).ok());
  });
}
