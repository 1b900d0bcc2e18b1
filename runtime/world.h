// World: the MPI job as this process sees it. Construct one in main(); it initialises
// MPI with the thread level the communication progress engines need (MPI_THREAD_MULTIPLE,
// checked), learns rank/size, the node-local rank/size and the hostname, and finalises
// MPI when destroyed. Everything else (communicators, allocators, loggers) is built from
// it and passed explicitly.
#pragma once

#include <memory>
#include <string>

#include "runtime/group.h"
#include "runtime/log.h"

namespace etr {

class World {
 public:
  // Calls MPI_Init_thread unless MPI is already initialised (then it neither
  // initialises nor finalises). Throws CommError when MPI_THREAD_MULTIPLE is missing.
  World(int* argc, char*** argv);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  int local_rank() const { return local_->rank(); }
  int local_size() const { return local_->size(); }
  const std::string& hostname() const { return hostname_; }

  // The whole job (a duplicate of MPI_COMM_WORLD named "world") and this node's ranks
  // (MPI_COMM_TYPE_SHARED: a simulated host is a node here, though its ranks share the
  // machine's CPUs with other hosts' ranks, which ranks_on_this_node counts together).
  const Group& group() const { return *world_; }
  const Group& local_group() const { return *local_; }
  Logger& log() const { return *log_; }

  void barrier() const;
  // Prints `message` with the rank prefix and ends the whole job (MPI_Abort).
  [[noreturn]] void abort(const std::string& message, int code = 1) const;

 private:
  bool owns_mpi_ = false;
  std::string hostname_;
  std::unique_ptr<Group> world_;
  std::unique_ptr<Group> local_;
  std::unique_ptr<Logger> log_;
};

}  // namespace etr
