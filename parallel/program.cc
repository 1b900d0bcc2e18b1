#include "parallel/program.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "parallel/checkpoint_cadence.h"
#include "runtime/bytes.h"
#include "runtime/cli_help.h"
#include "runtime/config/settings.h"
#include "runtime/elastic.h"
#include "runtime/error.h"
#include "runtime/heartbeat.h"
#include "runtime/mpi_wait.h"
#include "runtime/omp_env.h"
#include "runtime/world.h"
#include "runtime/error_text.h"
#include "runtime/env.h"
#include "runtime/control_ops.h"

namespace etr {
namespace {

struct CommandLine {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string trace_path;
  std::string resume;
  bool print_only = false;
  bool plan_only = false;
};

void add_options(CLI::App& app, CommandLine& c) {
  app.add_option("--config", c.config_path, "Configuration in protobuf text format "
                 "(runtime/config/etr_config.proto documents every field)");
  app.add_option("--set", c.overrides, "Override one field, e.g. --set model.n_layer=2 "
                 "(repeatable; later ones win)");
  app.add_option("--trace", c.trace_path, "Write a Chrome trace of the first log.trace_steps steps "
                 "of every rank to FILE (open it in ui.perfetto.dev); same as --set "
                 "log.trace_file=FILE");
  app.add_option("--resume", c.resume, "Resume from a checkpoint: 'latest' (the newest usable one in "
                 "checkpoint.dir and checkpoint.fast_dir; start fresh when there is none), or a "
                 "checkpoint directory, or a directory of them (falls back to older ones when the "
                 "newest is corrupt); same as --set checkpoint.resume=...");
  app.add_flag("--print-config", c.print_only, "Print the effective configuration and exit");
  app.add_flag("--plan", c.plan_only, "Build the job (its state allocated, no activations), print "
               "the memory model of each pipeline stage: the planned peak per rank for each "
               "micro-batch up to the budget, the largest that fits and what dominates; then exit");
}

TrainConfig configure(const CommandLine& c, const ElasticLaunch& launch, const ProgramInfo& info) {
  TrainConfig config = c.config_path.empty() ? TrainConfig() : load_config(c.config_path);
  apply_env_settings(config);  // the settings registry: ETR_COMM_TIMEOUT_S, ...
  apply_overrides(config, c.overrides);
  if (!c.trace_path.empty()) config.mutable_log()->set_trace_file(c.trace_path);
  if (!c.resume.empty()) config.mutable_checkpoint()->set_resume(c.resume);
  if (launch.active) {
    // etr-run relaunches the job from its newest checkpoint.
    if (!launch.checkpoint_dir.empty()) config.mutable_checkpoint()->set_dir(launch.checkpoint_dir);
    if (launch.restart > 0) config.mutable_checkpoint()->set_resume("latest");
    if (config.checkpoint().dir().empty() && config.checkpoint().fast_dir().empty()) {
      throw ConfigError("etr-run relaunches a job from its checkpoints, but none are "
                        "configured: pass --checkpoint-dir to etr-run or set checkpoint.dir");
    }
  }
  if (info.complete_config) info.complete_config(config);
  resolve(config, info.model_presets);
  return config;
}

// Trains and reports; the exit status of a run that raised nothing.
// --plan: the memory model of the first replica's stages, in stage order.
void print_memory_plan(TrainSession& session, World& world) {
  for (int r = 0; r < session.grid().pp_size(); ++r) {
    if (world.rank() == r) {
      std::string text = session.grid().pp_size() > 1
                             ? "pipeline stage " + std::to_string(r) + " (rank " + std::to_string(r) + "): "
                             : std::string();
      for (const std::string& line : session.memory_plan()) text += line + "\n";
      std::fputs(text.c_str(), stdout);
      std::fflush(stdout);
    }
    control::barrier(world.group().comm(), "the memory plan's printing (program)");
  }
}

int train(const TrainConfig& config, World& world, ElasticReporter& elastic,
          const ProgramInfo& info, const TrainProgram& program, bool plan_only) {
  // (before the session empties the memory tier, which a --resume latest may still want)
  if (!plan_only && config.checkpoint().resume().empty()) {
    try {
      refuse_earlier_checkpoints(config.checkpoint(), world.group());
    } catch (const ConfigError& e) {  // agreed on every rank: said once, no abort
      if (world.rank() == 0) print_error(info.name, e.what());
      return 1;
    }
  }
  TrainSession session(config, world.group(), world.log(), program, &elastic);
  if (plan_only) {
    print_memory_plan(session, world);
    return 0;
  }
  const RunSummary s = session.run();
  if (s.resized) return kResizeExitCode;
  // As the signal would have ended it, but saved; a stop whose checkpoint failed is an
  // error (its steps since the last checkpoint are lost: a scheduler must not take it for
  // a clean preemption).
  if (s.stopped) return s.stop_save_failed ? 1 : 128 + s.stop_signal;
  if (!s.sample.empty()) world.log().info("sample:\n", s.sample);
  if (world.rank() == 0) world.log().info(summary_line(s, world.size()));
  // Periodic saves that fail are reported and training goes on; a job whose last save
  // failed must not look successful.
  const CheckpointWriter* writer = session.checkpoint_writer();
  if (writer && !writer->stats().empty() && !writer->stats().back().ok) {
    if (world.rank() == 0) {
      std::fprintf(stderr, "%s: error: the last checkpoint (step %llu) was not saved: %s\n",
                   info.name.c_str(), static_cast<unsigned long long>(writer->stats().back().step),
                   writer->stats().back().error.c_str());
    }
    return 1;
  }
  return 0;
}

// An etr::Error after the configuration: tells etr-run whose fault it was and ends the job.
int fail(const Error& e, World& world, ElasticReporter& elastic, const std::string& name) {
  // A rank that raised its own error (a full disk, a bad file) may be on a bad host; a
  // timed-out collective says nothing of this rank, nor does a non-finite step (every
  // rank stops alike, and a relaunch from the same checkpoint would meet it again).
  const bool nonfinite = dynamic_cast<const NonFiniteError*>(&e) != nullptr;
  const bool own = dynamic_cast<const CommError*>(&e) == nullptr && !nonfinite;
  // A timeout names the peer it waited on: etr-run tells an unreachable host from it.
  const auto* comm = dynamic_cast<const CommError*>(&e);
  const int peer = comm ? comm->peer_world_rank() : -1;
  elastic.event("error rank=" + std::to_string(world.rank()) + " own=" + (own ? "1" : "0") +
                (peer >= 0 ? " peer=" + std::to_string(peer) : "") + (nonfinite ? " final=1" : ""));
  if (nonfinite) {  // every rank ends normally, and one says why
    if (world.rank() == 0) print_error(name, e.what());
    return 1;
  }
  if (world.size() > 1) world.abort(name + ": error: " + printable(e.what()), 1);
  print_error(name, e.what());
  return 1;
}

}  // namespace

std::string summary_line(const RunSummary& s, int world_size) {
  char line[320];
  std::snprintf(line, sizeof line,
                "done: %lld steps (from step %lld) in %.1f s | loss %.4f -> %.4f | held-out %.4f "
                "| %.0f tok/s | peak memory %s",
                static_cast<long long>(s.steps), static_cast<long long>(s.start_step), s.seconds,
                s.first_loss, s.final_loss, s.final_val_loss, s.tokens_per_second,
                format_bytes(static_cast<double>(s.peak_bytes)).c_str());
  std::string out = line;
  if (s.device_peak_bytes > 0) {
    out += " (on the GPU; " + format_bytes(static_cast<double>(s.device_peak_bytes)) +
           " by the driver's count, cuBLAS's workspace and the cache included)";
  }
  if (world_size > 1 && s.comm_steps > 0) {
    std::snprintf(line, sizeof line, " | gradient comm %.1f ms/step, %.0f%% hidden",
                  s.comm.comm_seconds / static_cast<double>(s.comm_steps) * 1e3,
                  s.comm.hidden_fraction() * 100);
    out += line;
  }
  if (s.skipped_steps > 0) {
    out += " | " + std::to_string(s.skipped_steps) + " non-finite step(s) skipped";
  }
  if (s.oom_recoveries > 0) {
    out += " | " + std::to_string(s.oom_recoveries) + " out-of-memory step(s) redone";
  }
  if (s.memory_replans > 0) {
    out += " | micro-batch re-planned " + std::to_string(s.memory_replans) + " time(s) for the budget";
  }
  return out;
}

int run_training_program(int argc, char** argv, const ProgramInfo& info,
                         const TrainProgram& program) {
  ensure_omp_spin_limit(argv);  // before MPI and OpenMP start (runtime/omp_env.h)
  // A file-size limit (ulimit -f) must fail a checkpoint write with EFBIG, which the writer
  // reports and survives, instead of killing the process.
  std::signal(SIGXFSZ, SIG_IGN);
  install_resize_signal_handler();  // etr-run's resize request may come at any time
  CLI::App app{info.description, info.name};
  CommandLine cl;
  add_options(app, cl);
  if (asks_for_help(argc, argv)) {  // the help text, before MPI starts
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
  }
  std::unique_ptr<World> world;
  ElasticLaunch launch;
  try {
    launch = ElasticLaunch::from_env();
    // SIGUSR2 (and, not under etr-run, SIGTERM and SIGINT): save the step and stop.
    install_stop_signal_handler(!launch.active);
    world = std::make_unique<World>(&argc, &argv);
  } catch (const std::exception& e) {
    print_error(info.name, e.what());
    return 1;
  }
  ElasticReporter elastic(launch);
  // Every rank's heartbeat to etr-run, from here to the process's end (runtime/heartbeat.h).
  std::unique_ptr<Heartbeat> heartbeat;
  try {
    heartbeat = std::make_unique<Heartbeat>(launch.heartbeat, launch.restart, world->rank());
    elastic.attach(heartbeat.get());
  } catch (const std::exception& e) {
    print_error(info.name, e.what());
    return 1;
  }
  if (world->rank() == 0) {
    elastic.event("started world=" + std::to_string(world->size()) + " restart=" +
                  std::to_string(launch.restart));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  bool configured = false;  // past the config: errors from here on may be one rank's own
  try {
    const TrainConfig config = configure(cl, launch, info);
    configured = true;
    // The one process-wide setting: every wait of this process uses the resolved timeout.
    set_collective_timeout(
        std::chrono::milliseconds(static_cast<int64_t>(config.comm().timeout_s() * 1000)));
    world->log().set_level(log_level(config));
    if (world->rank() == 0) {
      world->log().info("configuration:\n", format_config(config));
      world->log().info(env_settings_line());
      world->log().info(env_in_effect_line());
    }
    if (cl.print_only) return 0;
    return train(config, *world, elastic, info, program, cl.plan_only);
  } catch (const Error& e) {
    // A bad config fails alike on every rank before any communication: say it once.
    if (!configured) {
      if (world->rank() == 0) print_error(info.name, e.what());
      return 1;
    }
    return fail(e, *world, elastic, info.name);
  } catch (const std::bad_alloc& e) {
    // The sizes are checked against the host memory budget before the large allocations;
    // what still fails is memory the budget did not foresee (other processes took it).
    const std::string what = info.name + ": error: the operating system refused memory (" +
                             e.what() + ") although the sizes fit the host memory budget; free "
                             "memory or lower runtime.memory_budget, model or batch sizes.";
    if (world->size() > 1) world->abort(what, 1);
    std::fprintf(stderr, "%s\n", what.c_str());
    return 1;
  } catch (const std::exception& e) {
    const std::string what = info.name + ": internal error: " + e.what();
    if (world->size() > 1) world->abort(what, 2);
    std::fprintf(stderr, "%s\n", what.c_str());
    return 2;
  }
}

}  // namespace etr
