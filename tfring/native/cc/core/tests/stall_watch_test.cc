// The stall watch: a collective that waits too long says which ranks have not submitted it.
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/stall_watch.h"
#include "tests/ring_helpers.h"

using namespace tfring;
using namespace tfring_test;

namespace {

struct Lines {
  std::mutex mu;
  std::vector<std::string> lines;
  StallWatch::Log log() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(line);
    };
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mu);
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }
};

Request grads() {
  Request r;
  r.name = "grads";
  r.tensors = {{nullptr, nullptr, 24, {2, 3}}, {nullptr, nullptr, 16, {4}}};
  return r;
}

void waitSeconds(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

}  // namespace

TEST(stall_watch_names_the_ranks_that_have_not_submitted_the_collective) {
  auto store = std::make_shared<HashStore>();
  Lines zero, two;
  Request r = grads();
  {
    StallWatch w0(0, 3, 0.2, 60, store, zero.log()), w2(2, 3, 0.2, 60, store, two.log());
    w0.begin(5, &r);
    w2.begin(5, &r);  // rank 1 never comes
    waitSeconds(0.75);
    w0.end();
    w2.end();
  }
  const std::string text = zero.all();
  CHECK(text.find("tfring: rank 0 has waited") != std::string::npos);
  CHECK(text.find("in collective #5, allreduce 'grads' (2 tensors, shapes [2,3] [4]); rank 1 has not submitted it") !=
        std::string::npos);
  CHECK(two.all().find("rank 1 has not submitted it") != std::string::npos);
  // Repeated every 0.2 s while it waits: at 0.2, 0.4, 0.6 s.
  CHECK(zero.lines.size() >= 2 && zero.lines.size() <= 4);
}

TEST(stall_watch_says_when_every_rank_is_in_and_stays_quiet_otherwise) {
  auto store = std::make_shared<HashStore>();
  Lines zero, one, quick;
  Request r = grads();
  {
    StallWatch w0(0, 2, 0.2, 60, store, zero.log()), w1(1, 2, 0.2, 60, store, one.log());
    w0.begin(1, &r);
    w1.begin(1, &r);
    waitSeconds(0.5);
    w0.end();
    w1.end();
    // A collective that ends before the threshold logs nothing.
    StallWatch fast(0, 2, 0.3, 60, store, quick.log());
    for (uint64_t i = 2; i < 12; ++i) {
      fast.begin(i, &r);
      waitSeconds(0.02);
      fast.end();
    }
  }
  CHECK(zero.all().find("every rank has reached it") != std::string::npos);
  CHECK(quick.all().empty());
}

TEST(stall_watch_off_or_alone_starts_nothing) {
  auto store = std::make_shared<HashStore>();
  Lines off;
  Request r = grads();
  StallWatch zero(0, 2, 0, 60, store, off.log()), alone(0, 1, 0.1, 60, nullptr, off.log());
  zero.begin(0, &r);
  alone.begin(0, &r);
  waitSeconds(0.3);
  zero.end();
  alone.end();
  CHECK(off.all().empty());
}
