#include "rendezvous/rank_gather.h"

#include <cmath>
#include <cstdio>

namespace tfring {
namespace {

std::string rankList(const std::vector<int>& ranks) {
  std::string who = ranks.size() > 1 ? "ranks " : "rank ";
  for (size_t i = 0; i < ranks.size(); ++i) who += (i ? ", " : "") + std::to_string(ranks[i]);
  return who;
}

std::string joinWaitError(const std::string& what, const std::vector<int>& ranks, const Config& c, int seconds) {
  const bool many = ranks.size() > 1;
  std::string where = c.storePort ? " or cannot reach the store at " + c.storeHost + ":" + std::to_string(c.storePort) : "";
  return "rendezvous: no word from " + rankList(ranks) + " within " + std::to_string(seconds) + " s, waiting for " +
         (many ? "them" : "it") + " to " + what + " (" + (many ? "they" : "it") + " never started, crashed" + where +
         "; TFRING_RENDEZVOUS_TIMEOUT sets the limit)";
}

// Takes every value that has arrived meanwhile, without waiting; returns the ranks still missing.
std::vector<int> collectArrived(Store& store, const std::function<std::string(int)>& key, const std::vector<int>& missing,
                                std::vector<std::string>* values) {
  std::vector<int> still;
  for (int m : missing) {
    if (!store.tryGet(key(m), &(*values)[m])) still.push_back(m);
  }
  return still;
}

}  // namespace

std::vector<std::string> gatherFromRanks(Store& store, const Config& c, const std::string& what,
                                         const std::function<std::string(int)>& key, Deadline deadline) {
  std::vector<std::string> values(c.size);
  std::vector<int> missing;
  for (int r = 0; r < c.size; ++r) missing.push_back(r);
  const auto start = Clock::now();
  auto nextReport = Deadline::after(kReportEverySeconds);
  while (!missing.empty()) {
    // Wait for the first missing rank until the next report is due; then sweep up the others.
    const Deadline slice = nextReport.time() < deadline.time() ? nextReport : deadline;
    try {
      values[missing.front()] = store.get(key(missing.front()), slice);
      missing.erase(missing.begin());
      continue;
    } catch (const Error& e) {
      if (e.code() != Code::kDeadlineExceeded) throw;
    }
    missing = collectArrived(store, key, missing, &values);
    if (missing.empty()) break;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (deadline.expired()) {
      throw Error(Code::kDeadlineExceeded, joinWaitError(what, missing, c, static_cast<int>(std::lround(waited))));
    }
    std::fprintf(stderr, "tfring: rank %d is waiting for %s to %s (%ld s of %ld s)\n", c.rank,
                 rankList(missing).c_str(), what.c_str(), std::lround(waited),
                 std::lround(waited + deadline.remainingMs() / 1000.0));
    nextReport = Deadline::after(kReportEverySeconds);
  }
  return values;
}

void storeBarrier(Store& store, const std::string& name, int rank, int size, Deadline deadline) {
  store.set("barrier/" + name + "/" + std::to_string(rank), "1");
  Config c;
  c.rank = rank;
  c.size = size;
  gatherFromRanks(store, c, "reach '" + name + "'",
                  [&](int r) { return "barrier/" + name + "/" + std::to_string(r); }, deadline);
}

void leaveRendezvous(Store& store, const Config& c, Deadline deadline) {
  auto key = [](int r) { return "left/" + std::to_string(r); };
  if (c.rank != 0) {
    store.set(key(c.rank), "1");
    return;
  }
  store.set(key(0), "1");
  gatherFromRanks(store, c, "finish the rendezvous", key, deadline);
}

}  // namespace tfring
