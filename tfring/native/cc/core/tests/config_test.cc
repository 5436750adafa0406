// The configuration record (config.h): every key exactly once, each value of its key's type.
// Ranges and defaults are Python's to check and know; C++ only refuses what does not parse.
#include <string>

#include "common.h"
#include "config.h"
#include "tests/test_framework.h"

using namespace tfring;

namespace {

const char* kRecord =
    "rank=1\nsize=4\nlocal_rank=1\nlocal_size=2\nstore_host=10.0.0.7\nstore_port=29500\n"
    "secret=s3=cr=t\njob_id=job-7\nadvertise_host=\nrendezvous_timeout=120.0\ntimeout=60.5\n"
    "transport=tcp\nsingle_copy=0\nfusion_threshold_bytes=67108864\nstore_request_timeout=60.0\n"
    "store_auth_timeout=10.0\nstore_frame_timeout=30.0\nmixed_ring=1\nhost_id=rack4-node7\n"
    "allreduce_algorithm=auto\nstall_warning=10.0\ntimeline=/tmp/t.json\n";

// kRecord with the line of `key` replaced by `line` ("" drops it).
std::string with(const std::string& key, const std::string& line) {
  std::string s = kRecord;
  const size_t at = s.find("\n" + key + "=") + 1;
  const size_t end = s.find('\n', at) + 1;
  return s.substr(0, at) + (line.empty() ? "" : line + "\n") + s.substr(end);
}

}  // namespace

TEST(config_parses_a_complete_record) {
  Config c = Config::parse(kRecord);
  CHECK(c.rank == 1 && c.size == 4 && c.localRank == 1 && c.localSize == 2);
  CHECK_EQ(c.storeHost, std::string("10.0.0.7"));
  CHECK_EQ(c.storePort, 29500);
  CHECK_EQ(c.secret, std::string("s3=cr=t"));  // split at the first '=' only
  CHECK_EQ(c.jobId, std::string("job-7"));
  CHECK_EQ(c.advertiseHost, std::string(""));
  CHECK(c.rendezvousTimeout == 120.0 && c.collectiveTimeout == 60.5 && c.stallWarning == 10.0);
  CHECK_EQ(c.timeline, std::string("/tmp/t.json"));
  CHECK_EQ(c.transport, std::string("tcp"));
  CHECK(!c.singleCopy);
  CHECK(c.mixedRing);
  CHECK_EQ(c.allreduceAlgorithm, std::string("auto"));
  CHECK_EQ(c.hostId, std::string("rack4-node7"));
  CHECK_EQ(c.fusionThresholdBytes, size_t{64} << 20);
  CHECK(c.storeRequestTimeout == 60.0 && c.storeAuthTimeout == 10.0 && c.storeFrameTimeout == 30.0);
}

TEST(config_refuses_missing_unknown_and_repeated_keys) {
  CHECK_THROWS(Config::parse(with("store_frame_timeout", "")), "config: the record lacks store_frame_timeout");
  CHECK_THROWS(Config::parse("rank=0\n"), "lacks size, local_rank");
  CHECK_THROWS(Config::parse(std::string(kRecord) + "colour=blue\n"), "config: unknown key 'colour'");
  CHECK_THROWS(Config::parse(std::string(kRecord) + "rank=2\n"), "config: key 'rank' appears twice");
  CHECK_THROWS(Config::parse(std::string(kRecord) + "no equals sign\n"), "bad line 'no equals sign'");
}

TEST(config_refuses_values_that_are_not_of_their_type) {
  CHECK_THROWS(Config::parse(with("rank", "rank=one")), "config: rank must be an integer, got 'one'");
  CHECK_THROWS(Config::parse(with("store_port", "store_port=80x")), "store_port must be an integer");
  CHECK_THROWS(Config::parse(with("size", "size=99999999999")), "size must be an integer");
  CHECK_THROWS(Config::parse(with("timeout", "timeout=soon")), "timeout must be a number of seconds, got 'soon'");
  CHECK_THROWS(Config::parse(with("store_auth_timeout", "store_auth_timeout=")), "store_auth_timeout must be");
  CHECK_THROWS(Config::parse(with("single_copy", "single_copy=true")), "single_copy must be 0 or 1, got 'true'");
  CHECK_THROWS(Config::parse(with("transport", "transport=udp")), "transport must be auto, shm or tcp, got 'udp'");
  CHECK_THROWS(Config::parse(with("fusion_threshold_bytes", "fusion_threshold_bytes=-1")),
               "fusion_threshold_bytes must be a whole number of bytes, got '-1'");
  // host_id travels in the space-separated rendezvous record.
  CHECK_THROWS(Config::parse(with("host_id", "host_id=rack 4")), "host_id must be text without spaces, got 'rack 4'");
  CHECK_THROWS(Config::parse(with("host_id", "host_id=a\tb")), "host_id must be text without spaces");
  CHECK_EQ(Config::parse(with("host_id", "host_id=")).hostId, std::string(""));  // "": detect
  CHECK_THROWS(Config::parse(with("allreduce_algorithm", "allreduce_algorithm=tree")),
               "allreduce_algorithm must be auto, ring or hierarchical, got 'tree'");
}

TEST(config_checks_no_ranges) {
  // Python validates ranges; C++ takes any value of the right type.
  Config c = Config::parse(with("rank", "rank=7"));
  CHECK_EQ(c.rank, 7);  // >= size: not C++'s to judge
  c = Config::parse(with("timeout", "timeout=-1"));
  CHECK(c.collectiveTimeout == -1);
}
