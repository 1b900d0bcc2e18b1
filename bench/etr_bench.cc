// etr-bench: benchmarks that put etr beside a reference measured in the same run
// (docs/design.md, "Tests and benchmarks"). Run under mpirun, e.g.
//
//   build/etr-mpirun -np 2 build/bench/etr-bench allreduce --max-bytes 64MiB
//
// Each subcommand lives in its own file and registers itself below; rank 0 prints.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <string_view>

#include "bench/batch_bench.h"
#include "bench/bench_context.h"
#include "bench/ckpt_bench.h"
#include "bench/collective_bench.h"
#include "bench/dp_bench.h"
#include "bench/pipeline_bench.h"
#include "bench/zero_bench.h"
#include "bench/zero_grads_bench.h"
#include "bench/elastic_bench.h"
#ifdef ETR_HAVE_CUDA
#include "bench/gpu_bench.h"
#endif
#include "bench/manifest_bench.h"
#include "bench/memory_bandwidth.h"
#include "bench/subcommand.h"
#include "bench/train_bench.h"
#include "runtime/cli_help.h"
#include "runtime/config/settings.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/omp_env.h"
#include "runtime/world.h"
#include "runtime/error_text.h"
#include "runtime/env.h"

namespace {

// The registration function of every subcommand's file.
constexpr void (*kSubcommands[])(CLI::App&, etr::bench::SubcommandList&) = {
    etr::bench::add_collective_subcommands,       // allreduce, reduce_scatter, allgather
    etr::bench::add_memory_bandwidth_subcommand,  // membw
    etr::bench::add_train_subcommand,             // train
    etr::bench::add_dp_subcommand,                // dp
    etr::bench::add_ckpt_subcommand,              // ckpt
    etr::bench::add_elastic_subcommand,           // elastic
    etr::bench::add_pipeline_subcommand,          // pipeline
    etr::bench::add_batch_subcommand,             // batch
    etr::bench::add_zero_subcommand,              // zero
    etr::bench::add_zero_grads_subcommand,        // zero-grads
    etr::bench::add_manifest_subcommand,          // manifest
#ifdef ETR_HAVE_CUDA
    etr::bench::add_gpu_subcommands,         // gpu-alloc, gpu-cast
    etr::bench::add_gpu_kernels_subcommand,  // gpu-kernels
    etr::bench::add_gpu_train_subcommand,    // gpu-train
#endif
};

}  // namespace

int main(int argc, char** argv) {
  etr::ensure_omp_spin_limit(argv);  // before MPI and OpenMP start (runtime/omp_env.h)
  CLI::App app{
      "etr-bench: etr's collectives and kernels beside a reference measured in the same "
      "run. Run it under mpirun (build/etr-mpirun -np 2 ...); rank 0 prints.",
      "etr-bench"};
  app.require_subcommand(1);
  app.fallthrough();  // global options may follow the subcommand
  std::string log_level;
  app.add_option("--log-level", log_level,
                 "debug, info, warn, error or off (default: ETR_LOG_LEVEL, else info)");
  etr::bench::SubcommandList subcommands;
  for (auto add : kSubcommands) add(app, subcommands);
  if (etr::asks_for_help(argc, argv)) {  // the help text, before MPI starts
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
  }
  // The collective benches measure MPI's own collectives as the reference, at Open MPI's
  // defaults rather than with the yield World asks for (runtime/world.cc): with it a 4 KiB
  // MPI_Allreduce at np 2 took 5.3 us instead of 4.5, etr's own 7.0 instead of 6.9.
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "allreduce" || a == "reduce_scatter" || a == "allgather") {
      setenv("OMPI_MCA_mpi_yield_when_idle", "0", /*overwrite=*/0);
    }
  }
  std::unique_ptr<etr::World> world;
  try {
    world = std::make_unique<etr::World>(&argc, &argv);
  } catch (const std::exception& e) {
    etr::print_error("etr-bench", e.what());
    return 1;
  }
  const bool root = world->rank() == 0;

  // Every rank parses the same command line, so every rank reaches the same verdict.
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return root ? app.exit(e) : 0;
  } catch (const CLI::CallForAllHelp& e) {
    return root ? app.exit(e) : 0;
  } catch (const CLI::ParseError& e) {
    if (root) {
      std::string message = e.what();
      if (app.get_subcommands().empty()) {  // none given, or an unknown word instead
        std::string names;
        for (const auto& sub : subcommands)
          names += (names.empty() ? "" : ", ") + sub.cli->get_name();
        bool word = argc > 1 && argv[1][0] != '-';
        message =
            (word ? "unknown subcommand '" + std::string(argv[1]) + "'" : "no subcommand given") +
            "; use one of " + names;
      }
      etr::print_error("etr-bench", message + " (see etr-bench --help)");
    }
    return e.get_exit_code() ? e.get_exit_code() : 1;
  }

  try {
    if (!log_level.empty()) {
      world->log().set_level(etr::parse_log_level(log_level));
      setenv("ETR_LOG_LEVEL", log_level.c_str(), 1);  // for loggers made after this point
    }
    if (root) world->log().info(etr::env_settings_line());
    if (root) world->log().info(etr::env_in_effect_line());
    etr::bench::BenchContext ctx(*world);
    for (auto& sub : subcommands) {
      if (sub.cli->parsed()) sub.run(ctx);
    }
  } catch (const etr::ConfigError& e) {
    // Option values: the same on every rank, so every rank fails here; one says so.
    if (root) etr::print_error("etr-bench", e.what());
    return 1;
  } catch (const etr::bench::AgreedError& e) {
    if (root) etr::print_error("etr-bench", e.what());
    return 1;
  } catch (const std::exception& e) {
    // Possibly this rank alone: the others may be waiting in a collective, so end the job.
    std::fprintf(stderr, "etr-bench: error: rank %d: %s\n", world->rank(), e.what());
    std::fflush(stderr);
    world->abort("etr-bench failed", 1);
  }
  return 0;
}
