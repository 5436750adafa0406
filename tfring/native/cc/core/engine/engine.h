// The engine: one background thread per process that executes collectives strictly in the order
// they were enqueued. The TF glue chains a graph's collectives with control dependencies, so every
// rank enqueues the same collectives in the same order and no per-step negotiation is needed.
//
// Before moving data, each collective exchanges a digest of what every rank passed
// (request_digest.h): ranks that disagree all fail that one collective with kFailedPrecondition
// naming the tensor and the shapes, and stay usable. The same exchange carries a small
// allreduce's data (allreduce_gathered.h), an allgather's first dimensions, and is the barrier.
// A grouped allreduce is cut into fused passes
// (fusion_plan.h). A peer that dies or stalls fails the collective with kUnavailable naming the
// rank, and from then on every pending and future collective fails at once: the ring cannot heal,
// and waiting would only hang. A failure takes at most the collective's timeout and a couple of
// seconds to report, also when rank 0 (and with it the rendezvous store) stopped answering.
// A collective that waits longer than stall_warning logs which ranks have not submitted it
// (stall_watch.h). With a timeline (timeline.h) every collective is traced. A rank that joined
// (join.h) takes part in the others' allreduces with zeros until every rank has joined.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/allgather_framed.h"
#include "common.h"
#include "config.h"
#include "engine/join.h"
#include "engine/rank_names.h"
#include "engine/request.h"
#include "engine/stall_watch.h"
#include "engine/timeline.h"
#include "engine/traffic.h"
#include "rendezvous/store.h"
#include "status.h"
#include "transport/rings.h"
#include "transport/transport.h"

namespace tfring {

class Engine {
 public:
  // `store` (may be null) is only used to leave and read the reason of a failure.
  // `rings.world` is null for a job of one rank (a bare Transport converts to world-only Rings).
  // `scope`, when given, starts the message of every failure (a process set's engine names its set);
  // `names` gives the job rank of each position in the ring, for every message (rank_names.h).
  Engine(const Config& config, Rings rings, std::shared_ptr<Store> store, std::string scope = "",
         RankNames names = RankNames());
  ~Engine();
  // Never blocks; `done` runs on the engine thread (or here, if the engine already failed).
  void enqueue(Request request);
  std::string transportName() const;
  // This rank's position in the engine's ring, and the ring's size.
  int rank() const { return config_.rank; }
  int size() const { return config_.size; }
  const Traffic& traffic() const { return traffic_; }

 private:
  void loop();
  void execute(Request& r);
  void run(Request& r, Deadline d);
  // The cross-rank check of `r` (request_digest.h), carrying `payload` to every rank.
  std::vector<FramedBlock> agree(const Request& r, Deadline d, const IoList& payload = {});
  // Writes the timeline's spans of `r`, which ran from `began` until now.
  void trace(const Request& r, Timeline::Clock::time_point began);
  // Small allreduces gather every rank's input and reduce it locally (allreduce_gathered.h).
  bool gathers(const Request& r) const;
  void allreduceGathered(Request& r, Deadline d);
  // Adasum (algorithms/allreduce_adasum.h): every rank's request gathered, combined pairwise.
  void allreduceAdasum(Request& r, Deadline d);
  Transport* world() const { return rings_.world.get(); }
  void allreduce(Request& r, Deadline d);
  // One allreduce pass, over the world ring or hierarchically (transport/rings.h).
  void reduce(const IoList& in, const IoList& out, DataType type, ReduceOp op, Deadline d, PhaseSpans& phases);
  void broadcast(Request& r, Deadline d);
  void staged(Request& r, Deadline d);
  void allgather(Request& r, Deadline d);
  void reducescatter(Request& r, Deadline d);
  // A reduce-scatter whose tensors each go whole to one rank (Request::owners).
  void reduceToOwners(Request& r, Deadline d);
  void alltoall(Request& r, Deadline d);
  // hvd.join (join.h): takes part in the other ranks' allreduces with zeros until all have joined.
  void join(Request& r);
  void serveJoined(const JoinFacts& facts, Deadline d);
  // Every rank's int64 `mine` (an allgather's first dimension, an alltoall's splits), in rank order.
  std::vector<std::vector<int64_t>> agreeCounts(const Request& r, Deadline d, const std::vector<int64_t>& mine);
  // Calls r.allocate with `rows`; on failure returns a pointer into `scratch` instead and sets
  // *failed, so that this rank still takes part in the exchange.
  void* allocateOutput(Request& r, const std::vector<int64_t>& rows, size_t bytes, std::vector<uint8_t>* scratch,
                       std::string* failed);
  // Records a fatal failure, aborts the transport and fails everything queued.
  Status fail(const std::string& what, int peer);

  Config config_;
  std::string scope_;
  RankNames names_;
  Rings rings_;
  std::shared_ptr<Store> store_;
  std::vector<uint8_t> fusion_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> queue_;
  bool stop_ = false;
  Status failure_;
  Traffic traffic_;
  uint64_t executed_ = 0;  // collectives run so far: the next one's index, the same on every rank
  std::vector<int> joined_;  // the ranks that had joined at the running collective's check
  StallWatch stall_;
  Timeline timeline_;
  Timeline::Clock::time_point agreedAt_;  // when the running collective's agreement step ended
  std::thread thread_;
};

}  // namespace tfring
