// The fusion plan alone (engine/fusion_plan.h): where a list is cut into passes, which tensors
// are packed, and that packing round-trips. The engine tests check the same through the ring.
#include <cstring>
#include <vector>

#include "engine/fusion_plan.h"
#include "tests/test_framework.h"

using namespace tfring;

namespace {

std::vector<TensorRef> tensorsOf(const std::vector<size_t>& sizes) {
  std::vector<TensorRef> ts;
  for (size_t b : sizes) ts.push_back({nullptr, nullptr, b, {static_cast<int64_t>(b)}});
  return ts;
}

}  // namespace

TEST(fusion_plan_cuts_at_the_threshold_and_sends_big_tensors_alone) {
  auto passes = planFusion(tensorsOf({100, 200, 300, 5000, 50}), 600);
  CHECK_EQ(passes.size(), size_t{3});
  CHECK(passes[0].begin == 0 && passes[0].end == 3 && passes[0].packBytes == 600);
  CHECK(passes[1].begin == 3 && passes[1].end == 4);  // over the threshold: alone
  CHECK(passes[2].begin == 4 && passes[2].end == 5 && passes[2].packBytes == 50);
}

TEST(fusion_plan_threshold_zero_is_one_unpacked_tensor_per_pass) {
  auto passes = planFusion(tensorsOf({4, 8, 0}), 0);
  CHECK_EQ(passes.size(), size_t{3});
  for (const auto& p : passes) CHECK(p.end == p.begin + 1 && p.packBytes == 0);
}

TEST(fusion_plan_packs_small_tensors_and_leaves_big_ones_in_place) {
  std::vector<float> small(10, 1.0f), big(kPackBelow / 4, 2.0f), out(10);
  std::vector<TensorRef> ts = {{small.data(), out.data(), small.size() * 4, {10}},
                               {big.data(), big.data(), big.size() * 4, {int64_t(big.size())}}};
  auto passes = planFusion(ts, size_t{64} << 20);
  CHECK_EQ(passes.size(), size_t{1});
  CHECK(passes[0].packs(ts[0]) && !passes[0].packs(ts[1]));
  std::vector<uint8_t> buffer(passes[0].packBytes);
  IoList in, outList;
  passes[0].pack(ts, buffer.data(), &in, &outList);
  CHECK_EQ(in.size(), size_t{2});  // the packed region, then the big tensor in place
  CHECK(in[0].iov_base == buffer.data() && in[1].iov_base == big.data() && outList[1].iov_base == big.data());
  std::memset(buffer.data(), 0, 4);  // as if the ring had reduced the first element to 0
  passes[0].unpack(ts, buffer.data());
  CHECK_EQ(out[0], 0.0f);
  CHECK_EQ(out[9], 1.0f);
}
