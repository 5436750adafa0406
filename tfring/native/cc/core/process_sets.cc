#include "process_sets.h"

#include <algorithm>

#include "rendezvous/bootstrap.h"

namespace tfring {
namespace {

std::string rankText(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : " ") + std::to_string(r);
  return s;
}

void checkRanks(std::vector<int>* ranks, int size) {
  std::sort(ranks->begin(), ranks->end());
  if (ranks->empty()) throw Error(Code::kInvalidArgument, "a process set needs at least one rank");
  if (std::adjacent_find(ranks->begin(), ranks->end()) != ranks->end()) {
    throw Error(Code::kInvalidArgument, "process set [" + rankText(*ranks) + "] names a rank twice");
  }
  if (ranks->front() < 0 || ranks->back() >= size) {
    throw Error(Code::kInvalidArgument, "process set [" + rankText(*ranks) + "] names a rank outside the job's 0.." +
                                            std::to_string(size - 1));
  }
}

}  // namespace

ProcessSets::ProcessSets(const Config& config, std::shared_ptr<Engine> world, std::shared_ptr<Store> store)
    : config_(config), store_(std::move(store)) {
  std::vector<int> all(config.size);
  for (int r = 0; r < config.size; ++r) all[r] = r;
  sets_[0] = {all, std::move(world)};
}

int ProcessSets::add(std::vector<int> ranks) {
  checkRanks(&ranks, config_.size);
  const int existing = idOf(ranks);
  if (existing >= 0) {
    throw Error(Code::kInvalidArgument, "process set [" + rankText(ranks) + "] exists already (id " +
                                            std::to_string(existing) + ")");
  }
  int id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_++;
  }
  // Linking may take up to the rendezvous timeout: not under the lock, which collectives take.
  std::shared_ptr<Engine> engine = connect(id, ranks);
  std::lock_guard<std::mutex> lock(mu_);
  sets_[id] = {ranks, std::move(engine)};
  return id;
}

std::shared_ptr<Engine> ProcessSets::connect(int id, const std::vector<int>& ranks) {
  if (!std::binary_search(ranks.begin(), ranks.end(), config_.rank)) return nullptr;
  const std::string name = "set" + std::to_string(id);
  Config sub = subringConfig(config_, name, ranks);
  sub.timeline = "";  // the timeline traces the whole job's collectives
  std::shared_ptr<Store> store;
  Rings rings;
  if (ranks.size() > 1) {
    store = std::make_shared<PrefixStore>(name, store_);
    rings.world = connectProcessSet(config_, *store_, name, ranks);
  }
  const std::string scope = "process set " + std::to_string(id) + " (job ranks " + rankText(ranks) + ")";
  return std::make_shared<Engine>(sub, std::move(rings), store, scope, RankNames(ranks));
}

bool ProcessSets::remove(int id) {
  std::shared_ptr<Engine> engine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sets_.find(id);
    if (id == 0 || it == sets_.end()) return false;
    engine = std::move(it->second.engine);
    sets_.erase(it);
  }
  return true;  // the engine stops when the last kernel holding it lets go
}

const ProcessSets::Set& ProcessSets::find(int id) const {
  auto it = sets_.find(id);
  if (it == sets_.end()) {
    throw Error(Code::kInvalidArgument, "there is no process set with id " + std::to_string(id));
  }
  return it->second;
}

int ProcessSets::idOf(std::vector<int> ranks) const {
  std::sort(ranks.begin(), ranks.end());
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, set] : sets_) {
    if (set.ranks == ranks) return id;
  }
  return -1;
}

std::vector<int> ProcessSets::ranks(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return find(id).ranks;
}

std::shared_ptr<Engine> ProcessSets::engine(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Set& set = find(id);
  if (!set.engine) {
    throw Error(Code::kInvalidArgument, "rank " + std::to_string(config_.rank) + " is not in process set " +
                                            std::to_string(id) + " (job ranks " + rankText(set.ranks) + ")");
  }
  return set.engine;
}

}  // namespace tfring
