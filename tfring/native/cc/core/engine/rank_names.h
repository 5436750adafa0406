// How an engine names ranks in what it says: the job ranks users know. The whole job's ring names
// its positions as they are; a process set's ring (process_sets.h) holds some of the job's ranks,
// so its position p is the job rank jobRanks[p]. Links already name their peers by job rank
// (rendezvous/bootstrap.h), so every message of a set's engine names job ranks alike.
#pragma once

#include <string>
#include <vector>

namespace tfring {

class RankNames {
 public:
  RankNames() = default;  // the whole job's ring: position p is rank p
  explicit RankNames(std::vector<int> jobRanks) : jobRanks_(std::move(jobRanks)) {}

  // The job rank at ring position `position`.
  int operator()(int position) const { return jobRanks_.empty() ? position : jobRanks_.at(position); }
  // "rank 2" or "ranks 0, 2": the job ranks at `positions`.
  std::string ranks(const std::vector<int>& positions) const {
    std::string s;
    for (int p : positions) s += (s.empty() ? "" : ", ") + std::to_string((*this)(p));
    return (positions.size() == 1 ? "rank " : "ranks ") + s;
  }

 private:
  std::vector<int> jobRanks_;
};

}  // namespace tfring
