// The timeline: one Chrome-trace file per rank, each collective with its nested phases.
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/timeline.h"
#include "tests/ring_helpers.h"

using namespace tfring;
using namespace tfring_test;

namespace {
std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
}  // namespace

TEST(timeline_files_are_per_rank) {
  CHECK_EQ(rankPath("/tmp/trace.json", 3), std::string("/tmp/trace.rank3.json"));
  CHECK_EQ(rankPath("/tmp/trace", 0), std::string("/tmp/trace.rank0.json"));
  CHECK_THROWS(Timeline("/nonexistent-dir/trace.json", 0), "timeline: cannot write /nonexistent-dir/trace.rank0.json");
}

TEST(timeline_traces_each_collective_with_its_phases) {
  const std::string base = "/tmp/tfring-timeline-test-" + std::to_string(getpid()) + ".json";
  auto store = std::make_shared<HashStore>();
  std::string job = uniqueJob();
  spawn(2, [&](int rank) {
    Config c = rankConfig(rank, 2, allModes()[0], job);
    c.timeline = base;
    auto ps = std::make_shared<PrefixStore>(job, store);
    {
      Engine e(c, connectRing(c, *ps), ps);
      std::vector<std::vector<float>> big = {std::vector<float>(100000, 1.0f), std::vector<float>(3, 1.0f)},
                                      small = {std::vector<float>(3, 1.0f)};
      CHECK(call(e, allreduceOf(big)).ok());
      CHECK(call(e, allreduceOf(small)).ok());
    }
    storeBarrier(*ps, "test-end", rank, 2, Deadline::after(30));
  });
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = rankPath(base, rank);
    const std::string text = slurp(path);
    std::remove(path.c_str());
    CHECK(text.rfind("[\n", 0) == 0 && text.size() > 3 && text.substr(text.size() - 3) == "\n]\n");
    CHECK(text.find("\"name\":\"submit grads\"") != std::string::npos);
    CHECK(text.find("\"name\":\"allreduce grads\"") != std::string::npos);
    CHECK(text.find("\"name\":\"wait for peers\"") != std::string::npos);
    CHECK(text.find("\"name\":\"move data\"") != std::string::npos);
    // Inside "move data" of the ring allreduce: its two phases, and the small tensor beside the
    // big one packed and unpacked.
    for (const char* phase : {"reduce-scatter", "allgather", "pack", "unpack"}) {
      CHECK(text.find(std::string("\"name\":\"") + phase + "\"") != std::string::npos);
    }
    CHECK(text.find("allreduce 'grads' (2 tensors, shapes [100000] [3])") != std::string::npos);
    CHECK(text.find("\"name\":\"rank " + std::to_string(rank) + "\"") != std::string::npos);
  }
}
