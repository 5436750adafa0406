// Says who is missing when a collective stalls (Horovod's stall inspector, for the ring).
//
// A rank waiting in a collective cannot tell from its ring neighbours which rank has not
// submitted it. So once a collective has waited 1 s (a tenth of `warnAfter` if less), each waiting
// rank leaves the key "stall/<index>/<rank>" in the rendezvous store; at `warnAfter`, and every
// `warnAfter` after that until the collective ends or the hard timeout fails it, it logs the
// collective (kind, name, tensor count, first shapes) and the ranks without a key: those have not
// reached it (or reached it within the last second). Collectives shorter than that never touch
// the store; the engine thread only marks begin/end. No request to the store outlives the
// collective's timeout, so a store that stopped answering holds up neither the failure nor the
// shutdown.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/rank_names.h"
#include "engine/request.h"
#include "rendezvous/store.h"

namespace tfring {

class StallWatch {
 public:
  using Log = std::function<void(const std::string&)>;
  // `warnAfter` <= 0 turns the watch off (no thread).
  // `names` gives the job rank of each position, for what it says (rank_names.h).
  StallWatch(int rank, int size, double warnAfter, double timeout, std::shared_ptr<Store> store, Log log,
             RankNames names = RankNames());
  ~StallWatch();
  // The engine thread runs collective `index` (the same on every rank); `r` outlives end().
  void begin(uint64_t index, const Request* r);
  void end();

 private:
  using Clock = std::chrono::steady_clock;
  void loop();
  // One look at the running collective: marks it in the store, or logs, when due.
  void check(std::unique_lock<std::mutex>& lock);
  // Reads the other ranks' keys; gives up (with any answer) once the watch is stopping, or the
  // store has not answered by `until`.
  std::string missingRanks(uint64_t index, Deadline until);
  bool stopping();

  const int rank_, size_;
  const double warnAfter_, timeout_;
  std::shared_ptr<Store> store_;
  Log log_;
  RankNames names_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  const Request* running_ = nullptr;
  uint64_t index_ = 0;
  Clock::time_point began_;
  bool marked_ = false;
  int warnings_ = 0;
  std::thread thread_;
};

// "allreduce 'name' (3 tensors, first shapes [2,3] [4])": a collective, for people.
std::string summarizeRequest(const Request& r);

}  // namespace tfring
