#include "transport/host_layout.h"

#include <algorithm>

#include "common.h"

namespace tfring {

HostLayout hostLayout(const std::vector<std::string>& machines) {
  std::vector<std::string> hosts;  // in order of first appearance
  std::vector<int> counts;
  bool contiguous = true;
  for (const auto& m : machines) {
    auto it = std::find(hosts.begin(), hosts.end(), m);
    if (it == hosts.end()) {
      hosts.push_back(m);
      counts.push_back(1);
      continue;
    }
    if (it != hosts.end() - 1) contiguous = false;  // a host seen before the previous one
    ++counts[it - hosts.begin()];
  }
  HostLayout layout;
  layout.hosts = static_cast<int>(hosts.size());
  const bool equal = std::all_of(counts.begin(), counts.end(), [&](int n) { return n == counts[0]; });
  layout.perHost = contiguous && equal && !counts.empty() ? counts[0] : 0;
  return layout;
}

bool useHierarchical(const std::string& algorithm, const HostLayout& layout) {
  if (algorithm == "ring" || layout.hosts == 1) return false;
  if (layout.regular()) return layout.perHost > 1;
  if (algorithm == "hierarchical") {
    throw Error(Code::kInvalidArgument,
                "allreduce_algorithm=hierarchical needs the same number of ranks on every host, each host's "
                "ranks contiguous in rank order (as tfring run -H places them); this job's " +
                    std::to_string(layout.hosts) +
                    " hosts are not laid out so: use allreduce_algorithm=auto or ring, or place ranks host by host");
  }
  return false;
}

}  // namespace tfring
