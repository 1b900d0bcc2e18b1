// etr-train: trains the example GPT-2 (README.md, "etr-train").
//
//   etr-train --config configs/demo.pbtxt [--set model.n_layer=2 ...] [--trace FILE]
//             [--resume DIR|latest] [--print-config]
//   mpirun -np 4 etr-train ...          data parallel: one replica per rank
//   etr-run --min-np 1 --max-np 4 ... -- etr-train ...   elastic (runtime/launcher/)
//
// The configuration is a protobuf text file (runtime/config/etr_config.proto documents
// every field); --set overrides any field by its path. The effective configuration is
// printed once at start; a progress line every log.log_every steps; the held-out loss
// every log.eval_every steps; a generated sample and a summary at the end.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "examples/train/trainer.h"
#include "runtime/bytes.h"
#include "runtime/elastic.h"
#include "runtime/error.h"
#include "runtime/omp_env.h"
#include "runtime/world.h"

int main(int argc, char** argv) {
  etr::ensure_omp_spin_limit(argv);  // before MPI and OpenMP start (runtime/omp_env.h)
  // A file-size limit (ulimit -f) must fail a checkpoint write with EFBIG, which the writer
  // reports and survives, instead of killing the process.
  std::signal(SIGXFSZ, SIG_IGN);
  // etr-run's resize request (SIGUSR1, forwarded by mpirun) may come at any time.
  etr::install_resize_signal_handler();
  std::unique_ptr<etr::World> world;
  etr::ElasticLaunch launch;
  try {
    launch = etr::ElasticLaunch::from_env();
    world = std::make_unique<etr::World>(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "etr-train: error: %s\n", e.what());
    return 1;
  }
  etr::ElasticReporter elastic(launch);
  if (world->rank() == 0) {
    elastic.event("started world=" + std::to_string(world->size()) + " restart=" +
                  std::to_string(launch.restart));
  }
  CLI::App app{"etr-train: trains the example GPT-2 on a token file or a synthetic corpus.",
               "etr-train"};
  std::string config_path;
  std::vector<std::string> overrides;
  std::string trace_path;
  std::string resume;
  bool print_only = false;
  app.add_option("--config", config_path, "Configuration in protobuf text format "
                 "(runtime/config/etr_config.proto documents every field)");
  app.add_option("--set", overrides, "Override one field, e.g. --set model.n_layer=2 "
                 "(repeatable; later ones win)");
  app.add_option("--trace", trace_path, "Write a Chrome trace of the first log.trace_steps steps "
                 "of every rank to FILE (open it in ui.perfetto.dev); same as --set "
                 "log.trace_file=FILE");
  app.add_option("--resume", resume, "Resume from a checkpoint: 'latest' (the newest usable one in "
                 "checkpoint.dir and checkpoint.fast_dir; start fresh when there is none), or a "
                 "checkpoint directory, or a directory of them (falls back to older ones when the "
                 "newest is corrupt); same as --set checkpoint.resume=...");
  app.add_flag("--print-config", print_only, "Print the effective configuration and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  bool configured = false;  // past the config: errors from here on may be one rank's own
  try {
    etr::TrainConfig config = config_path.empty() ? etr::TrainConfig() : etr::load_config(config_path);
    etr::apply_overrides(config, overrides);
    if (!trace_path.empty()) config.mutable_log()->set_trace_file(trace_path);
    if (!resume.empty()) config.mutable_checkpoint()->set_resume(resume);
    if (launch.active) {
      // etr-run relaunches the job from its newest checkpoint.
      if (!launch.checkpoint_dir.empty()) config.mutable_checkpoint()->set_dir(launch.checkpoint_dir);
      if (launch.restart > 0) config.mutable_checkpoint()->set_resume("latest");
      if (config.checkpoint().dir().empty() && config.checkpoint().fast_dir().empty()) {
        throw etr::ConfigError("etr-run relaunches a job from its checkpoints, but none are "
                               "configured: pass --checkpoint-dir to etr-run or set checkpoint.dir");
      }
    }
    etr::resolve(config);
    configured = true;
    world->log().set_level(etr::log_level(config));
    if (world->rank() == 0) world->log().info("configuration:\n", etr::format_config(config));
    if (print_only) return 0;
    etr::train::Trainer trainer(config, *world, &elastic);
    etr::train::RunSummary s = trainer.run();
    if (s.resized) return etr::kResizeExitCode;
    if (!s.sample.empty()) world->log().info("sample:\n", s.sample);
    char line[320];
    std::snprintf(line, sizeof line,
                  "done: %lld steps (from step %lld) in %.1f s | loss %.4f -> %.4f | held-out %.4f "
                  "| %.0f tok/s | peak memory %s",
                  static_cast<long long>(s.steps), static_cast<long long>(s.start_step), s.seconds, s.first_loss, s.final_loss,
                  s.final_val_loss, s.tokens_per_second,
                  etr::format_bytes(static_cast<double>(s.peak_bytes)).c_str());
    if (world->size() > 1 && s.comm_steps > 0) {
      const size_t n = std::strlen(line);
      std::snprintf(line + n, sizeof line - n, " | gradient comm %.1f ms/step, %.0f%% hidden",
                    s.comm.comm_seconds / static_cast<double>(s.comm_steps) * 1e3,
                    s.comm.hidden_fraction() * 100);
    }
    if (s.skipped_steps > 0) {
      const size_t n = std::strlen(line);
      std::snprintf(line + n, sizeof line - n, " | %lld non-finite step(s) skipped",
                    static_cast<long long>(s.skipped_steps));
    }
    if (world->rank() == 0) world->log().info(line);
    // Periodic saves that fail are reported and training goes on; a job whose last save
    // failed must not look successful.
    const etr::CheckpointWriter* writer = trainer.checkpoint_writer();
    if (writer && !writer->stats().empty() && !writer->stats().back().ok) {
      if (world->rank() == 0) {
        std::fprintf(stderr, "etr-train: error: the last checkpoint (step %llu) was not saved: %s\n",
                     static_cast<unsigned long long>(writer->stats().back().step),
                     writer->stats().back().error.c_str());
      }
      return 1;
    }
  } catch (const etr::Error& e) {
    // A bad config fails alike on every rank before any communication: say it once and
    // exit normally. Later, end the whole job now: the peers may be waiting for this
    // rank in a collective and would otherwise wait for the communication timeout.
    if (!configured) {
      if (world->rank() == 0) std::fprintf(stderr, "etr-train: error: %s\n", e.what());
      return 1;
    }
    // Tell etr-run whose fault it was: a rank that raised its own error (a full disk, a
    // bad file) may be on a bad host; a timed-out collective says nothing of this rank,
    // nor does a non-finite step (every rank stops alike).
    // A non-finite step would recur after a relaunch from the same checkpoint (final=1).
    const bool nonfinite = dynamic_cast<const etr::train::NonFiniteError*>(&e) != nullptr;
    const bool own = dynamic_cast<const etr::CommError*>(&e) == nullptr && !nonfinite;
    elastic.event("error rank=" + std::to_string(world->rank()) + " own=" + (own ? "1" : "0") +
                  (nonfinite ? " final=1" : ""));
    // Every rank stops at a non-finite step alike (the decision rides on a sum): they end
    // normally, and one says why.
    if (nonfinite) {
      if (world->rank() == 0) std::fprintf(stderr, "etr-train: error: %s\n", e.what());
      return 1;
    }
    if (world->size() > 1) world->abort(std::string("etr-train: error: ") + e.what(), 1);
    std::fprintf(stderr, "etr-train: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc& e) {
    // The sizes are checked against the host memory budget before the large allocations;
    // what still fails is memory the budget did not foresee (other processes took it).
    const std::string what =
        std::string("etr-train: error: the operating system refused memory (") + e.what() +
        ") although the sizes fit the host memory budget; free memory or lower "
        "runtime.host_memory_budget, model or batch sizes.";
    if (world->size() > 1) world->abort(what, 1);
    std::fprintf(stderr, "%s\n", what.c_str());
    return 1;
  } catch (const std::exception& e) {
    if (world->size() > 1) world->abort(std::string("etr-train: internal error: ") + e.what(), 2);
    std::fprintf(stderr, "etr-train: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
