// The rendezvous store: a tiny key-value store the ranks use to find each other.
// A store never knows what its keys are for (Gloo's rendezvous/store.h); every wait has a deadline.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common.h"

namespace tfring {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits until `key` exists; throws kDeadlineExceeded naming the key when it never appears.
  virtual std::string get(const std::string& key, Deadline deadline) = 0;
  // Atomically adds `delta` to the integer stored at `key` (absent: 0) and returns the sum.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Returns the value if the key exists, without waiting.
  virtual bool tryGet(const std::string& key, std::string* value) = 0;
  // The same requests, given up at `deadline` when that comes before the store's own limit (a
  // failing rank's last words must not wait a whole request timeout on a store that stopped
  // answering). A store that always answers at once has nothing to give up: these call the above.
  virtual void set(const std::string& key, const std::string& value, Deadline deadline) {
    (void)deadline;
    set(key, value);
  }
  virtual bool tryGet(const std::string& key, std::string* value, Deadline deadline) {
    (void)deadline;
    return tryGet(key, value);
  }
};

// In-memory store shared by thread-ranks in one process (tests).
class HashStore : public Store {
 public:
  using Store::set;
  using Store::tryGet;
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Deadline deadline) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool tryGet(const std::string& key, std::string* value) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_;
};

// Namespaces every key of another store ("prefix/key"), so one store can serve several jobs.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store)
      : prefix_(std::move(prefix)), store_(std::move(store)) {}
  void set(const std::string& key, const std::string& value) override {
    store_->set(prefix_ + "/" + key, value);
  }
  std::string get(const std::string& key, Deadline deadline) override {
    return store_->get(prefix_ + "/" + key, deadline);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return store_->add(prefix_ + "/" + key, delta);
  }
  bool tryGet(const std::string& key, std::string* value) override {
    return store_->tryGet(prefix_ + "/" + key, value);
  }
  void set(const std::string& key, const std::string& value, Deadline deadline) override {
    store_->set(prefix_ + "/" + key, value, deadline);
  }
  bool tryGet(const std::string& key, std::string* value, Deadline deadline) override {
    return store_->tryGet(prefix_ + "/" + key, value, deadline);
  }

 private:
  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace tfring
