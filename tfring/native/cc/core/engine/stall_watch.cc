#include "engine/stall_watch.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

#include "status.h"

namespace tfring {
namespace {
constexpr size_t kShapesShown = 3;
// A rank in a collective for this long (or a tenth of the interval, if less) leaves its key: soon
// enough that a rank which arrived well before the warning is not named as missing, late enough
// that collectives that simply finish never touch the store.
constexpr double kMarkAfter = 1.0;

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string key(uint64_t index, int rank) { return "stall/" + std::to_string(index) + "/" + std::to_string(rank); }
}  // namespace

std::string summarizeRequest(const Request& r) {
  std::string s = std::string(kindName(r.kind)) + " '" + r.name + "'";
  if (r.tensors.empty()) return s;
  s += " (" + std::to_string(r.tensors.size()) + (r.tensors.size() == 1 ? " tensor" : " tensors") + ", shape";
  s += r.tensors.size() == 1 ? " " : "s ";
  for (size_t i = 0; i < std::min(r.tensors.size(), kShapesShown); ++i) {
    s += (i ? " " : "") + shapeText(r.tensors[i].shape);
  }
  return s + (r.tensors.size() > kShapesShown ? " ...)" : ")");
}

StallWatch::StallWatch(int rank, int size, double warnAfter, double timeout, std::shared_ptr<Store> store, Log log,
                       RankNames names)
    : rank_(rank),
      size_(size),
      warnAfter_(warnAfter),
      timeout_(timeout),
      store_(std::move(store)),
      log_(std::move(log)),
      names_(std::move(names)) {
  if (warnAfter_ > 0 && size_ > 1 && store_) thread_ = std::thread([this] { loop(); });
}

StallWatch::~StallWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StallWatch::begin(uint64_t index, const Request* r) {
  if (!thread_.joinable()) return;
  std::lock_guard<std::mutex> lock(mu_);
  running_ = r;
  index_ = index;
  began_ = Clock::now();
  marked_ = false;
  warnings_ = 0;
}

void StallWatch::end() {
  if (!thread_.joinable()) return;
  std::lock_guard<std::mutex> lock(mu_);
  running_ = nullptr;
}

bool StallWatch::stopping() {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

void StallWatch::loop() {
  const auto tick = std::chrono::duration<double>(std::min(1.0, warnAfter_ / 4));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, tick);
    if (!stop_ && running_) check(lock);
  }
}

void StallWatch::check(std::unique_lock<std::mutex>& lock) {
  const double waited = std::chrono::duration<double>(Clock::now() - began_).count();
  const uint64_t index = index_;
  // The watch never talks to the store past the collective's own deadline: a store that stopped
  // answering (rank 0 stopped) must not hold up the failure's report or the shutdown after it.
  const Deadline until(began_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_)));
  if (until.expired()) return;
  if (!marked_ && waited >= std::min(kMarkAfter, warnAfter_ / 10)) {
    marked_ = true;
    lock.unlock();
    try {
      store_->set(key(index, rank_), "1", until);
    } catch (const std::exception&) {
      // The store is gone (rank 0 died): the collective itself will fail and say so.
    }
    lock.lock();
    return;
  }
  if (waited < warnAfter_ * (warnings_ + 1) || running_ == nullptr) return;
  ++warnings_;
  const std::string what = summarizeRequest(*running_);
  lock.unlock();
  const std::string missing = missingRanks(index, until);
  if (stopping()) return;  // the engine is shutting down: say nothing, keep no lock
  char head[160];
  std::snprintf(head, sizeof(head), "tfring: rank %d has waited %.0f s (of %.0f s) in collective #%llu, ", names_(rank_),
                waited, timeout_, static_cast<unsigned long long>(index));
  log_(head + what + "; " + missing);
  lock.lock();
}

std::string StallWatch::missingRanks(uint64_t index, Deadline until) {
  std::vector<int> missing;
  try {
    for (int k = 0; k < size_ && !stopping(); ++k) {
      std::string value;
      if (k != rank_ && !store_->tryGet(key(index, k), &value, until)) missing.push_back(k);
    }
  } catch (const std::exception& e) {
    return std::string("the rendezvous store cannot say which ranks are missing (") + e.what() + ")";
  }
  if (missing.empty()) return "every rank has reached it: data is still moving (a slow link or a busy rank?)";
  return names_.ranks(missing) + (missing.size() == 1 ? " has" : " have") + " not submitted it";
}

}  // namespace tfring
