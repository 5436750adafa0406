// How a job's ranks sit on hosts, read from the host identities every rank published at
// rendezvous, and whether that shape lets allreduces go hierarchical (allreduce_hierarchical.h):
// H hosts with the same number L of ranks each, each host's ranks contiguous in rank order (what
// `tfring run -H`, `mpirun --map-by slot` and srun's block distribution give).
#pragma once

#include <string>
#include <vector>

namespace tfring {

struct HostLayout {
  int hosts = 1;
  int perHost = 0;  // ranks on every host; 0 when hosts hold different counts or are interleaved
  bool regular() const { return perHost > 0; }
};

// `machines[r]` is rank r's host identity.
HostLayout hostLayout(const std::vector<std::string>& machines);

// Whether allreduces take the hierarchical path; `algorithm` is the setting allreduce_algorithm
// (auto | ring | hierarchical). Only regular layouts with several hosts of several ranks each do.
// With "hierarchical", a layout of several hosts that is not regular (different counts, a host's
// ranks interleaved) is an error that says why; one host, or one rank per host, is the flat ring
// (the hierarchical allreduce would be the same ring).
bool useHierarchical(const std::string& algorithm, const HostLayout& layout);

}  // namespace tfring
