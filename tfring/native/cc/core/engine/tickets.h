// Collectives started now and waited for later: the start/done op pair behind gradient buckets.
//
// A bucket's start op hands its collective to the engine and returns at once with a ticket, so
// the next bucket's start op (chained after it, to keep every rank's submission order) can follow
// as soon as its own gradients exist; the bucket's done op redeems the ticket and completes when
// the collective has. The tensors the engine reads and writes stay alive (`keep`) until the
// collective has finished, whether or not the ticket is ever redeemed (a step that was cancelled).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "engine/request.h"
#include "status.h"

namespace tfring {

class Tickets {
 public:
  using Done = std::function<void(const Status&)>;

  // Wraps `request.done` so the outcome is kept under the returned ticket, then `submit`s it.
  uint64_t start(Request request, std::shared_ptr<void> keep, const std::function<void(Request)>& submit);
  // Calls `done` once the ticket's collective has finished (at once, here, if it has), and
  // forgets the ticket. An unknown ticket, or one already redeemed (finished or not), gets
  // kInvalidArgument. A ticket never redeemed (its step was cancelled) keeps only its outcome.
  void redeem(uint64_t ticket, Done done);
  // Tickets started and not yet redeemed.
  size_t outstanding() const;

 private:
  struct Entry {
    bool finished = false;
    Status status;
    Done waiter;
  };
  void finish(uint64_t ticket, const Status& s);

  mutable std::mutex mu_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, Entry> entries_;
};

}  // namespace tfring
