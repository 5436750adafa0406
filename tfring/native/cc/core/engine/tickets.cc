#include "engine/tickets.h"

#include <string>
#include <utility>

namespace tfring {

uint64_t Tickets::start(Request request, std::shared_ptr<void> keep,
                        const std::function<void(Request)>& submit) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket = next_++;
    entries_[ticket];
  }
  request.done = [this, ticket, keep = std::move(keep)](const Status& s) mutable {
    keep.reset();  // the tensors may go before the waiter runs: it only reads the status
    finish(ticket, s);
  };
  submit(std::move(request));
  return ticket;
}

void Tickets::finish(uint64_t ticket, const Status& s) {
  Done waiter;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = entries_[ticket];
    if (!e.waiter) {
      e.finished = true;
      e.status = s;
      return;
    }
    waiter = std::move(e.waiter);
    entries_.erase(ticket);
  }
  waiter(s);
}

void Tickets::redeem(uint64_t ticket, Done done) {
  Status s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(ticket);
    if (it == entries_.end() || it->second.waiter) {
      s = Status::error(Code::kInvalidArgument,
                        "collective ticket " + std::to_string(ticket) + " is unknown or was already waited for");
    } else if (!it->second.finished) {
      it->second.waiter = std::move(done);
      return;
    } else {
      s = it->second.status;
      entries_.erase(it);
    }
  }
  done(s);
}

size_t Tickets::outstanding() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace tfring
