#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "algorithms/allgather_ring.h"
#include "algorithms/allreduce_adasum.h"
#include "algorithms/allreduce_gathered.h"
#include "algorithms/allreduce_hierarchical.h"
#include "algorithms/allreduce_ring.h"
#include "algorithms/alltoall_ring.h"
#include "algorithms/broadcast_ring.h"
#include "engine/fusion_plan.h"
#include "engine/request_digest.h"

namespace tfring {
namespace {
// The longest a failing rank spends reporting its failure to the rendezvous store.
constexpr double kReportSeconds = 2.0;
}  // namespace

Engine::Engine(const Config& config, Rings rings, std::shared_ptr<Store> store, std::string scope, RankNames names)
    : config_(config),
      scope_(scope.empty() ? "" : std::move(scope) + ": "),
      names_(std::move(names)),
      rings_(std::move(rings)),
      store_(std::move(store)),
      stall_(config.rank, config.size, config.stallWarning, config.collectiveTimeout, store_,
             [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }, names_),
      timeline_(config.timeline, config.rank) {
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  rings_.abort();  // unblocks a collective still waiting on a peer
  thread_.join();
}

std::string Engine::transportName() const { return rings_.name(); }

void Engine::enqueue(Request request) {
  if (timeline_.on()) timeline_.instant("submit " + request.name, Timeline::kSubmitted, summarizeRequest(request));
  Status failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok() && !stop_) {
      queue_.push_back(std::move(request));
      cv_.notify_one();
      return;
    }
    failed = failure_.ok() ? Status::error(Code::kFailedPrecondition, "tfring was shut down") : failure_;
  }
  request.done(failed);
}

void Engine::loop() {
  for (;;) {
    Request r;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      r = std::move(queue_.front());
      queue_.pop_front();
    }
    Status failed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      failed = failure_;
      if (stop_ && failed.ok()) failed = Status::error(Code::kFailedPrecondition, "tfring was shut down");
    }
    if (!failed.ok()) {
      r.done(failed);
      continue;
    }
    execute(r);
  }
}

void Engine::execute(Request& r) {
  const Deadline deadline = Deadline::after(config_.collectiveTimeout);
  stall_.begin(executed_++, &r);
  struct Ended {
    StallWatch& watch;
    ~Ended() { watch.end(); }
  } ended{stall_};
  const auto began = Timeline::Clock::now();
  try {
    run(r, deadline);
    traffic_.count(r);
    if (timeline_.on()) trace(r, began);
    r.done(Status());
  } catch (const PeerError& e) {
    stall_.end();  // the watch leaves the store to the failure's report
    r.done(fail(scope_ + "tfring." + kindName(r.kind) + " '" + r.name + "' failed on rank " +
                    std::to_string(names_(config_.rank)) + ": " + e.what(),
                e.rank()));
  } catch (const Error& e) {
    r.done(Status::error(e.code(), scope_ + e.what()));
  } catch (const std::exception& e) {
    r.done(Status::error(Code::kInternal, e.what()));
  }
}

void Engine::run(Request& r, Deadline d) {
  if (r.staged) {
    agree(r, d);
    return staged(r, d);
  }
  switch (r.kind) {
    case OpKind::kAllreduce:
      if (r.op == ReduceOp::kAdasum) return allreduceAdasum(r, d);
      if (gathers(r)) return allreduceGathered(r, d);
      agree(r, d);
      return allreduce(r, d);
    case OpKind::kBroadcast:
      agree(r, d);
      return broadcast(r, d);
    case OpKind::kAllgather:
      return allgather(r, d);  // its check carries every rank's first dimension
    case OpKind::kBarrier:
      agree(r, d);  // the check is a ring allgather: no rank leaves it before every rank entered
      return;
    case OpKind::kReducescatter:
      agree(r, d);
      return reducescatter(r, d);
    case OpKind::kAlltoall:
      return alltoall(r, d);  // its check carries every rank's splits
    case OpKind::kJoin:
      return join(r);
  }
}

std::vector<FramedBlock> Engine::agree(const Request& r, Deadline d, const IoList& payload) {
  if (config_.size == 1) return {};
  const auto start = std::chrono::steady_clock::now();
  const auto wall = Timeline::Clock::now();
  auto blocks = checkRanksAgree(world(), config_.size, r, config_.fusionThresholdBytes, d, payload, &joined_, names_);
  traffic_.waited(r.kind, std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now() - start).count());
  if (timeline_.on()) {
    agreedAt_ = Timeline::Clock::now();
    timeline_.span("wait for peers", Timeline::kEngine, wall, agreedAt_, r.name);
  }
  return blocks;
}

void Engine::trace(const Request& r, Timeline::Clock::time_point began) {
  const auto end = Timeline::Clock::now();
  const std::string what = summarizeRequest(r);
  if (agreedAt_ >= began) timeline_.span("move data", Timeline::kEngine, agreedAt_, end, what);
  timeline_.span(std::string(kindName(r.kind)) + " " + r.name, Timeline::kEngine, began, end, what);
}

bool Engine::gathers(const Request& r) const {
  size_t bytes = 0;
  for (const auto& t : r.tensors) bytes += t.bytes;
  return gathersAllreduce(bytes, config_.size);
}

void Engine::allreduceGathered(Request& r, Deadline d) {
  std::vector<uint8_t> mine;  // packed, also because an output may be its own input
  IoList out;
  for (const auto& t : r.tensors) {
    mine.insert(mine.end(), static_cast<const uint8_t*>(t.in), static_cast<const uint8_t*>(t.in) + t.bytes);
    out.push_back({t.out, t.bytes});
  }
  auto blocks = agree(r, d, {{mine.data(), mine.size()}});
  std::vector<const uint8_t*> inputs(config_.size, mine.data());
  const std::vector<uint8_t> zeros(joined_.empty() ? 0 : mine.size(), 0);  // a joined rank's input
  for (int k = 0; k < config_.size; ++k) {
    if (k == config_.rank) continue;
    if (std::find(joined_.begin(), joined_.end(), k) != joined_.end()) {
      inputs[k] = zeros.data();
      continue;
    }
    if (blocks[k].payload.size() != mine.size()) {
      throw PeerError(names_(k), "rank " + std::to_string(names_(k)) + " sent " + std::to_string(blocks[k].payload.size()) +
                             " bytes for a request that it described as ours (" + std::to_string(mine.size()) + ")");
    }
    inputs[k] = blocks[k].payload.data();
  }
  reduceInRankOrder(inputs, out, r.type, r.op);
}

void Engine::allreduceAdasum(Request& r, Deadline d) {
  agree(r, d);  // first: ranks that disagree fail there, and every rank refuses alike below
  const std::string why = adasumRefusal(config_.size, r.type);
  if (!why.empty()) throw Error(Code::kInvalidArgument, "tfring.allreduce '" + r.name + "': " + why);
  size_t bytes = 0;
  IoList out;
  for (const auto& t : r.tensors) {
    bytes += t.bytes;
    out.push_back({t.out, t.bytes});
  }
  // Every rank's packed request, in rank order (an output may be its own input: copied first).
  const size_t total = bytes * static_cast<size_t>(config_.size);
  if (fusion_.size() < total) fusion_.resize(total);
  uint8_t* mine = fusion_.data() + bytes * static_cast<size_t>(config_.rank);
  for (const auto& t : r.tensors) {
    if (t.bytes) std::memcpy(mine, t.in, t.bytes);
    mine += t.bytes;
  }
  ringAllgather(world(), config_.size, {{fusion_.data(), total}}, std::vector<size_t>(config_.size, bytes), d);
  std::vector<const uint8_t*> blocks;
  for (int k = 0; k < config_.size; ++k) blocks.push_back(fusion_.data() + bytes * static_cast<size_t>(k));
  adasumInTreeOrder(blocks, out, r.type);
}

void Engine::allreduce(Request& r, Deadline d) {
  for (const FusionPass& pass : planFusion(r.tensors, config_.fusionThresholdBytes)) {
    if (fusion_.size() < pass.packBytes) fusion_.resize(pass.packBytes);
    IoList in, out;
    PhaseSpans phases(timeline_, r.name);
    pass.pack(r.tensors, fusion_.data(), &in, &out);
    if (pass.packBytes) phases.mark("pack");
    reduce(in, out, r.type, r.op, d, phases);
    pass.unpack(r.tensors, fusion_.data());
    if (pass.packBytes) phases.mark("unpack");
  }
}

void Engine::reduce(const IoList& in, const IoList& out, DataType type, ReduceOp op, Deadline d,
                    PhaseSpans& phases) {
  if (!rings_.hierarchical()) {
    return ringAllreduce(world(), config_.size, in, out, type, op, d, 0,
                         [&phases](const char* phase) { phases.mark(phase); });
  }
  hierarchicalAllreduce(rings_.local.get(), rings_.localSize, rings_.cross.get(), rings_.hosts, in, out, type, op, d);
  phases.mark("hierarchical allreduce");
}

void Engine::broadcast(Request& r, Deadline d) {
  IoList data;
  for (auto& t : r.tensors) {
    if (t.in != t.out && t.bytes) std::memcpy(t.out, t.in, t.bytes);
    data.push_back({t.out, t.bytes});
  }
  ringBroadcast(world(), config_.size, r.root, data, d);
}

void Engine::staged(Request& r, Deadline d) {
  if (r.kind != OpKind::kAllreduce && r.kind != OpKind::kBroadcast) {
    throw Error(Code::kInvalidArgument, std::string("tfring.") + kindName(r.kind) + " '" + r.name +
                                            "': only allreduce and broadcast take staged (device) tensors");
  }
  if (r.op == ReduceOp::kAdasum) {  // staged pieces are not whole tensors: no per-tensor dot products
    throw Error(Code::kInvalidArgument, "tfring.allreduce '" + r.name + "': Adasum of device (GPU) tensors is not "
                                      "supported; reduce host copies of them");
  }
  r.staged([&](void* data, size_t bytes) {
    IoList piece = {{data, bytes}};
    if (r.kind == OpKind::kAllreduce) {
      PhaseSpans phases(timeline_, r.name);
      reduce(piece, piece, r.type, r.op, d, phases);
    } else {
      ringBroadcast(world(), config_.size, r.root, piece, d);
    }
  });
}

std::vector<std::vector<int64_t>> Engine::agreeCounts(const Request& r, Deadline d, const std::vector<int64_t>& mine) {
  const size_t bytes = mine.size() * sizeof(int64_t);
  auto gathered = agree(r, d, {{const_cast<int64_t*>(mine.data()), bytes}});
  std::vector<std::vector<int64_t>> all(config_.size, mine);
  for (int k = 0; k < config_.size; ++k) {
    if (k == config_.rank) continue;
    if (gathered[k].payload.size() != bytes) {
      throw PeerError(names_(k), "rank " + std::to_string(names_(k)) + " sent " + std::to_string(gathered[k].payload.size()) +
                             " bytes of row counts for a " + kindName(r.kind) + " (expected " + std::to_string(bytes) + ")");
    }
    std::memcpy(all[k].data(), gathered[k].payload.data(), bytes);
    for (int64_t v : all[k]) {
      if (v < 0) {
        throw PeerError(names_(k), "rank " + std::to_string(names_(k)) + " sent a negative row count for a " + kindName(r.kind));
      }
    }
  }
  return all;
}

void* Engine::allocateOutput(Request& r, const std::vector<int64_t>& rows, size_t bytes, std::vector<uint8_t>* scratch,
                             std::string* failed) {
  std::string error;
  void* out = r.allocate(rows, &error);
  if (error.empty() && (out != nullptr || bytes == 0)) return out;
  *failed = error.empty() ? "no memory" : error;
  scratch->resize(bytes);
  return scratch->data();
}

namespace {
// The bytes of one row (all dimensions but the first) of `t`, from the shape so that a tensor of
// zero rows has its row size too.
size_t rowBytes(const TensorRef& t, DataType type) {
  size_t bytes = dataTypeSize(type);
  for (size_t q = 1; q < t.shape.size(); ++q) bytes *= static_cast<size_t>(t.shape[q]);
  return bytes;
}
}  // namespace

void Engine::allgather(Request& r, Deadline d) {
  const TensorRef& t = r.tensors.at(0);
  const int64_t first = t.shape.empty() ? 1 : t.shape[0];
  std::vector<int64_t> dims;
  for (const auto& row : agreeCounts(r, d, {first})) dims.push_back(row[0]);
  // Rows have the same size on every rank (validated in the check).
  const size_t row = rowBytes(t, r.type);
  std::vector<size_t> blocks(config_.size);
  size_t total = 0, mineAt = 0;
  for (int k = 0; k < config_.size; ++k) {
    blocks[k] = static_cast<size_t>(dims[k]) * row;
    if (k < config_.rank) mineAt += blocks[k];
    total += blocks[k];
  }
  std::vector<uint8_t> scratch;
  std::string failed;
  void* out = allocateOutput(r, dims, total, &scratch, &failed);
  if (t.bytes) std::memcpy(static_cast<uint8_t*>(out) + mineAt, t.in, t.bytes);
  ringAllgather(world(), config_.size, {{out, total}}, blocks, d);
  if (!failed.empty()) throw Error(Code::kInternal, "allgather could not allocate its output: " + failed);
}

void Engine::reducescatter(Request& r, Deadline d) {
  if (r.op == ReduceOp::kAdasum) {
    throw Error(Code::kInvalidArgument, "tfring.reducescatter '" + r.name + "': Adasum combines whole tensors; "
                                        "only the allreduce takes it");
  }
  if (!r.owners.empty()) return reduceToOwners(r, d);
  // Packed by destination: block k holds every tensor's rows for rank k, in list order.
  const int size = config_.size;
  size_t total = 0;
  for (const auto& t : r.tensors) total += t.bytes;
  if (fusion_.size() < total) fusion_.resize(total);
  std::vector<size_t> blocks(size, 0);
  size_t at = 0, mineAt = 0;
  for (int k = 0; k < size; ++k) {
    if (k == config_.rank) mineAt = at;
    for (const auto& t : r.tensors) {
      const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
      const size_t row = rowBytes(t, r.type);
      const size_t bytes = static_cast<size_t>(reducescatterRows(rows, size, k)) * row;
      const size_t from = static_cast<size_t>(reducescatterFirstRow(rows, size, k)) * row;
      if (bytes) std::memcpy(fusion_.data() + at, static_cast<const uint8_t*>(t.in) + from, bytes);
      at += bytes;
      blocks[k] += bytes;
    }
  }
  IoList all = {{fusion_.data(), total}};
  ringReduceScatterToRanks(world(), size, all, all, blocks, r.type, r.op, d, size);
  for (const auto& t : r.tensors) {
    const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
    const size_t bytes = static_cast<size_t>(reducescatterRows(rows, size, config_.rank)) * rowBytes(t, r.type);
    if (bytes) std::memcpy(t.out, fusion_.data() + mineAt, bytes);
    mineAt += bytes;
  }
}

void Engine::reduceToOwners(Request& r, Deadline d) {
  // Block k is rank k's tensors, in list order, each read where it lies: this rank's reductions go
  // to their outputs (which may be their inputs), the other blocks' partial sums to scratch.
  const int size = config_.size;
  if (r.owners.size() != r.tensors.size()) {
    throw Error(Code::kInvalidArgument, "tfring.reducescatter '" + r.name + "': " + std::to_string(r.owners.size()) +
                                            " owners for " + std::to_string(r.tensors.size()) + " tensors");
  }
  size_t scratch = 0;
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const int o = r.owners[i];
    if (o < 0 || o >= size) {
      throw Error(Code::kInvalidArgument, "tfring.reducescatter '" + r.name + "': owner " + std::to_string(o) +
                                              " is not a rank of this ring of " + std::to_string(size));
    }
    if (o != config_.rank) scratch += r.tensors[i].bytes;
  }
  if (fusion_.size() < scratch) fusion_.resize(scratch);
  std::vector<size_t> blocks(size, 0);
  IoList in, out;
  size_t at = 0;
  for (int k = 0; k < size; ++k) {
    for (size_t i = 0; i < r.tensors.size(); ++i) {
      const TensorRef& t = r.tensors[i];
      if (r.owners[i] != k || t.bytes == 0) continue;
      in.push_back({const_cast<void*>(t.in), t.bytes});
      out.push_back({k == config_.rank ? t.out : fusion_.data() + at, t.bytes});
      if (k != config_.rank) at += t.bytes;
      blocks[k] += t.bytes;
    }
  }
  ringReduceScatterToRanks(world(), size, in, out, blocks, r.type, r.op, d, size);
}

namespace {
// The alltoall's own splits, checked before the exchange (only this rank passed them): one
// non-negative row count per rank, adding up to the tensor's first dimension.
void checkSplits(const std::vector<int64_t>& splits, const std::vector<int64_t>& shape, int size) {
  auto fail = [](const std::string& what) { throw Error(Code::kInvalidArgument, "tfring.alltoall: " + what); };
  if (shape.empty()) fail("needs a tensor of rank >= 1 (it sends rows), got a scalar");
  if (splits.size() != static_cast<size_t>(size)) {
    fail("splits must hold one row count per rank (" + std::to_string(size) + "), got " +
         std::to_string(splits.size()));
  }
  int64_t rows = 0;
  for (int d = 0; d < size; ++d) {
    if (splits[d] < 0) fail("splits must not be negative, got " + std::to_string(splits[d]) + " for rank " + std::to_string(d));
    rows += splits[d];
  }
  if (rows != shape[0]) {
    fail("the splits add up to " + std::to_string(rows) + " rows but the tensor has " + std::to_string(shape[0]) +
         ": they do not add up to its first dimension");
  }
}
}  // namespace

void Engine::alltoall(Request& r, Deadline d) {
  const TensorRef& t = r.tensors.at(0);
  const int size = config_.size;
  checkSplits(r.splits, t.shape, size);
  const size_t row = rowBytes(t, r.type);
  const auto rows = agreeCounts(r, d, r.splits);  // rows[o][k]: what rank o sends rank k
  std::vector<std::vector<size_t>> bytes(size, std::vector<size_t>(size));
  std::vector<int64_t> received(size);
  size_t total = 0;
  for (int o = 0; o < size; ++o) {
    for (int k = 0; k < size; ++k) bytes[o][k] = static_cast<size_t>(rows[o][k]) * row;
    received[o] = rows[o][config_.rank];
    total += bytes[o][config_.rank];
  }
  std::vector<uint8_t> scratch;
  std::string failed;
  void* out = allocateOutput(r, received, total, &scratch, &failed);
  ringAlltoall(world(), size, {{const_cast<void*>(t.in), t.bytes}}, {{out, total}}, bytes, d);
  if (!failed.empty()) throw Error(Code::kInternal, "alltoall could not allocate its output: " + failed);
}

void Engine::join(Request& r) {
  auto finish = [&r](int last) {
    if (r.joined) r.joined(last);
  };
  if (config_.size == 1) return finish(0);
  const uint64_t joinedAt = executed_ - 1;  // this request's index: execute() counted it
  stall_.end();  // a joined rank waits for the others' next collective as long as they compute
  for (;;) {
    const Deadline d = Deadline::after(config_.collectiveTimeout);
    JoinRound round = joinRound(world(), config_.size, config_.rank, config_.fusionThresholdBytes, joinedAt, d, names_);
    if (round.allJoined) return finish(round.lastJoined);
    ++executed_;  // one of the other ranks' collectives
    if (round.serve) serveJoined(round.facts, d);
  }
}

void Engine::serveJoined(const JoinFacts& facts, Deadline d) {
  Request zero;
  zero.kind = facts.kind;
  zero.name = "join";
  zero.type = facts.type;
  zero.op = facts.op;
  std::vector<std::vector<uint8_t>> buffers;
  buffers.reserve(facts.shapes.size());
  for (const auto& shape : facts.shapes) {
    size_t bytes = dataTypeSize(facts.type);
    for (int64_t dim : shape) bytes *= static_cast<size_t>(dim);
    buffers.emplace_back(bytes, 0);
    zero.tensors.push_back({buffers.back().data(), buffers.back().data(), bytes, shape});
  }
  if (gathers(zero)) return;  // the others read our check's payload as zeros
  allreduce(zero, d);
}

Status Engine::fail(const std::string& what, int peer) {
  std::string message = what;
  if (store_) {
    // Leave the first failure's reason for the other ranks, or read the one already there: a rank
    // whose neighbour merely aborted learns which rank really failed. Briefly: the store answers
    // in milliseconds unless rank 0 stopped answering, and the collective's timeout should bound
    // how long a failing rank takes to exit.
    const Deadline report = Deadline::after(std::min(config_.storeRequestTimeout, kReportSeconds));
    try {
      std::string prior;
      if (store_->tryGet("abort", &prior, report)) {
        message += " (first failure, reported by another rank: " + prior + ")";
      } else {
        store_->set("abort", what, report);
      }
    } catch (const std::exception& e) {
      // On rank 0 the store is its own. Elsewhere a request it did not answer in time says that
      // rank 0 stopped answering; a closed connection, that it exited.
      const auto* error = dynamic_cast<const Error*>(&e);
      const bool storeHere = names_(config_.rank) == 0;  // the store lives on job rank 0
      if (!storeHere && error && error->code() == Code::kDeadlineExceeded) {
        message += peer == 0 ? " (its rendezvous store stopped answering too)"
                             : " (the rendezvous store on rank 0 stopped answering too)";
      } else if (!storeHere && peer != 0) {
        message += " (the rendezvous store on rank 0 is gone too)";
      }
    }
  }
  rings_.abort();
  std::deque<Request> pending;
  Status status = Status::error(Code::kUnavailable, message);
  {
    std::lock_guard<std::mutex> lock(mu_);
    failure_ = status;
    pending.swap(queue_);
  }
  for (auto& q : pending) q.done(status);
  return status;
}

}  // namespace tfring
