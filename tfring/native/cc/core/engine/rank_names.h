// How an engine names ranks in what it says: the job ranks users know. The whole job's ring names
// its positions as they are; a process set's ring (process_sets.h) holds some of the job's ranks,
// so its position p is the job rank jobRanks[p]. Links already name their peers by job rank
// (rendezvous/bootstrap.h), so every message of a set's engine names job ranks alike.
#pragma once

#include <string>
#include <vector>

namespace tfring {

// "0, 2": ranks for a message.
inline std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (int k : ranks) s += (s.empty() ? "" : ", ") + std::to_string(k);
  return s;
}

class RankNames {
 public:
  RankNames() = default;  // the whole job's ring: position p is rank p
  explicit RankNames(std::vector<int> jobRanks) : jobRanks_(std::move(jobRanks)) {}

  // The job rank at ring position `position`.
  int operator()(int position) const { return jobRanks_.empty() ? position : jobRanks_.at(position); }
  // The job ranks at `positions`.
  std::vector<int> operator()(const std::vector<int>& positions) const {
    std::vector<int> ranks;
    for (int p : positions) ranks.push_back((*this)(p));
    return ranks;
  }
  // "rank 2" or "ranks 0, 2": the job ranks at `positions`.
  std::string ranks(const std::vector<int>& positions) const {
    return (positions.size() == 1 ? "rank " : "ranks ") + rankList((*this)(positions));
  }

 private:
  std::vector<int> jobRanks_;
};

}  // namespace tfring
