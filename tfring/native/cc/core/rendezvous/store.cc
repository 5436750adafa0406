#include "rendezvous/store.h"

namespace tfring {

void HashStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

std::string HashStore::get(const std::string& key, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_until(lock, deadline.time(), [&] { return data_.count(key) > 0; })) {
    throw Error(Code::kDeadlineExceeded, "store: key '" + key + "' did not appear before the deadline");
  }
  return data_[key];
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t sum;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    sum = (it == data_.end() ? 0 : std::stoll(it->second)) + delta;
    data_[key] = std::to_string(sum);
  }
  cv_.notify_all();
  return sum;
}

bool HashStore::tryGet(const std::string& key, std::string* value) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  *value = it->second;
  return true;
}

}  // namespace tfring
