// The message for ranks that passed different requests: its hint names the likely cause.
#include <string>
#include <vector>

#include "engine/request_digest.h"
#include "tests/test_framework.h"

using namespace tfring;

namespace {

// Rank k's side of the exchange: describeRequest()'s lines, then the op name.
std::string side(const std::string& head, const std::string& shape, const std::string& name) {
  return head + "\n" + shape + "\npasses: fusion_threshold_bytes=67108864\nname: " + name + "\n";
}

std::string mismatch(const std::string& head0, const std::string& name0, const std::string& head1,
                     const std::string& name1, const std::string& shape1 = "[8, 2]") {
  Request r;
  r.kind = OpKind::kAllreduce;
  r.name = name0;
  return mismatchMessage(r, {side(head0, "[8, 2]", name0), side(head1, shape1, name1)});
}

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

const std::string kTwo = "allreduce dtype=float32 op=mean tensors=2";
const std::string kFour = "allreduce dtype=float32 op=mean tensors=4";

}  // namespace

// Op names that name layers, weights or optimizer state show that the ranks differ in what they
// train, not in how many steps they ran: the hint says so, and does not blame the datasets.
TEST(mismatch_hint_names_a_model_or_optimizer_difference) {
  for (const auto& names : std::vector<std::pair<std::string, std::string>>{
           {"dense_1/kernel", "batch_normalization/gamma"},      // other layers
           {"sequential_dense_1_kernel", "sequential_dense_1_kernel"},  // the same variable, other counts
           {"SGD/momentum", "Adam/velocity"},                     // other optimizers
       }) {
    const std::string m = mismatch(kTwo, names.first, kFour, names.second);
    CHECK(has(m, "rank 0 called " + kTwo + " ('" + names.first + "') but rank 1 called " + kFour));
    CHECK(has(m, "different models or optimizers"));
    CHECK(!has(m, "datasets of different sizes"));
  }
  // A variable whose shape differs between ranks: a model difference too.
  const std::string m = mismatch(kTwo, "dense_1/kernel", kTwo, "dense_1/kernel", "[8, 8]");
  CHECK(has(m, "tensor 0 has shape [8, 2] on rank 0 but [8, 8] on rank 1"));
  CHECK(has(m, "different models or optimizers"));
}

// Names that say nothing about the model (TensorFlow's default op name, a user's label) keep the
// hint about ranks out of step.
TEST(mismatch_hint_without_model_names_says_out_of_step) {
  for (const auto& names : std::vector<std::pair<std::string, std::string>>{
           {"TfringAllreduce", "TfringAllreduce"}, {"grads", "metrics"}, {"dense_1/kernel", "TfringAllreduce"}}) {
    const std::string m = mismatch(kTwo, names.first, kFour, names.second);
    CHECK(has(m, "out of step"));
    CHECK(!has(m, "different models or optimizers"));
  }
  CHECK(!has(mismatch(kTwo, "grads", kTwo, "grads", "[8, 8]"), "different models"));
}
