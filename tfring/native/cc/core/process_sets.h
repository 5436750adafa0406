// Process sets (Horovod's `hvd.ProcessSet`): collectives over some of the job's ranks.
//
// Set 0 is the whole job, run by the runtime's engine. Every other set this rank belongs to gets
// an engine of its own over a ring of its members (rendezvous/bootstrap.h connectProcessSet), so
// the collectives of different sets run independently, each set's in the order its members submit
// them, as Horovod runs them. Every rank of the job adds and removes the same sets in the same
// order (the callers check that first), so a set's id is the same on every rank.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config.h"
#include "engine/engine.h"
#include "rendezvous/store.h"

namespace tfring {

class ProcessSets {
 public:
  // `world` runs set 0; `store` (null in a job of one rank) is where the sets' rings meet.
  ProcessSets(const Config& config, std::shared_ptr<Engine> world, std::shared_ptr<Store> store);

  // Adds the set of `ranks` (job ranks) and returns its id. When this rank is a member, first links
  // the set's ring with the other members (each member blocks here until all have come, at most
  // the rendezvous timeout). Throws kInvalidArgument for ranks out of range, repeated or none, or
  // the ranks of a set that exists (Horovod's duplicate rule).
  int add(std::vector<int> ranks);
  // Removes set `id` (not 0); collectives already handed to its engine fail. False when unknown.
  bool remove(int id);
  // The id of the set of `ranks` (any order), or -1 when there is none.
  int idOf(std::vector<int> ranks) const;
  // The job ranks of set `id`, ascending. Throws kInvalidArgument when there is no such set.
  std::vector<int> ranks(int id) const;
  // The engine of set `id`. Throws kInvalidArgument when there is no such set or this rank is not in it.
  std::shared_ptr<Engine> engine(int id) const;

 private:
  struct Set {
    std::vector<int> ranks;
    std::shared_ptr<Engine> engine;  // null on ranks outside the set
  };
  const Set& find(int id) const;  // throws as ranks() does; call with mu_ held
  std::shared_ptr<Engine> connect(int id, const std::vector<int>& ranks);

  Config config_;
  std::shared_ptr<Store> store_;
  mutable std::mutex mu_;
  std::map<int, Set> sets_;
  int next_ = 1;
};

}  // namespace tfring
