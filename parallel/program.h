// The skeleton of a training program (etr-train's, or a user's own: README.md, "Using etr
// from your own program"): command line, configuration, the session, the summary, and
// what every error becomes.
//
//   int main(int argc, char** argv) {
//     return etr::run_training_program(argc, argv, {"my-train", "Trains my model."},
//                                      my_program());
//   }
//
// Command line: --config FILE (protobuf text, runtime/config/etr_config.proto), --set
// PATH=VALUE (repeatable), --trace FILE, --resume DIR|latest, --print-config.
// Exit status: 0 done; 1 a user error (one sentence on stderr: bad config, missing file,
// non-finite loss, a failed last checkpoint); 2 a command-line usage error or an internal
// error; 75 (kResizeExitCode) stopped at a step boundary for etr-run to relaunch the job
// at another size; 128 + N stopped by signal N (SIGTERM, SIGINT, or SIGUSR2 from etr-run:
// under etr-run every rank 140, elsewhere a rank that got none 143) at a step boundary
// after saving a durable checkpoint of that step (runtime/elastic.h). Under mpirun, an
// error after the configuration ends the whole job (MPI_Abort) so that no peer waits for
// the communication timeout.
#pragma once

#include <functional>
#include <span>
#include <string>

#include "parallel/train_session.h"
#include "runtime/config/train_config.h"

namespace etr {

struct ProgramInfo {
  std::string name;         // "etr-train": the prefix of its messages
  std::string description;  // one line for --help
  // Fills what the user left unset from names the program knows (model presets); called
  // before resolve(). Null: nothing.
  std::function<void(TrainConfig&)> complete_config;
  // The program's model presets (model.preset; resolve() in runtime/config). Empty: none.
  std::span<const ModelPreset> model_presets;
};

int run_training_program(int argc, char** argv, const ProgramInfo& info,
                         const TrainProgram& program);

// The summary line of a run: "done: 6 steps (from step 0) in 1.2 s | loss ... ".
std::string summary_line(const RunSummary& s, int world_size);

}  // namespace etr
