// The one runtime object of a process: the configuration, the rendezvous store (served here on
// rank 0) and the engine. Created by tfring.init() through the C API, torn down by shutdown().
#pragma once

#include <memory>
#include <mutex>

#include "config.h"
#include "engine/engine.h"
#include "engine/tickets.h"
#include "process_sets.h"
#include "rendezvous/store.h"
#include "rendezvous/tcp_store.h"

namespace tfring {

class Runtime {
 public:
  // Starts the runtime; a second call with the same rank/size is a no-op, a different one an error.
  static void init(const Config& config);
  static void shutdown();
  // The running runtime, or null before init / after shutdown.
  static std::shared_ptr<Runtime> current();

  explicit Runtime(const Config& config);
  const Config& config() const { return config_; }
  Engine& engine() { return *engine_; }
  // Horovod's process sets; set 0 is engine().
  ProcessSets& processSets() { return *sets_; }
  // Collectives started by one op and waited for by another (gradient buckets).
  Tickets& tickets() { return tickets_; }

 private:
  Config config_;
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> store_;
  Tickets tickets_;  // before engine_: the engine's last callbacks may still reach it
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<ProcessSets> sets_;  // after engine_: the sets' engines stop first
};

}  // namespace tfring
