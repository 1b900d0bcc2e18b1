// etr-ckpt: inspects, checks, restores, reshards and exports etr checkpoints
// (docs/checkpoint_format.md describes the files).
//
//   etr-ckpt list DIR [DIR...] [--quick]        the checkpoints, their status, the resume pick
//   etr-ckpt show CKPT                          the manifest as text
//   etr-ckpt verify CKPT                        sizes and XXH3 checksums of every file
//   etr-ckpt restore CKPT --to DIR              copy in, make it the one DIR resumes from
//   etr-ckpt rollback DIR [DIR...] --step S     move the newer checkpoints aside
//   etr-ckpt reshard CKPT --world N -o OUT      rewrite for another world size
//   etr-ckpt export CKPT -o model.safetensors   the parameters in Hugging Face GPT-2 names
//   etr-ckpt prune DIR --keep K                 delete all but the newest K
//
// A checkpoint (CKPT) is a step-NNNNNNNNN directory; a directory of checkpoints (DIR) is a
// tier such as etr-train's checkpoint.dir. Status: 0 done, 1 an error (one sentence on
// stderr), 2 a usage error. Nothing but prune deletes: rollback and restore move
// checkpoints into DIR/rolled-back-<unix ms>/.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>

#include "examples/ckpt/ckpt_commands.h"
#include "runtime/error.h"
#include "runtime/error_text.h"

namespace {

using namespace etr::ckpt_tool;

struct Options {
  ListOptions list;
  std::string show, verify;
  RestoreOptions restore;
  RollbackOptions rollback;
  ReshardOptions reshard;
  ExportOptions export_;
  PruneOptions prune;
};

// A subcommand's callback: makes `f` the one to run.
using Chooser = std::function<std::function<void()>(std::function<int()>)>;

// The subcommands that read checkpoints: list, show, verify, export.
void add_reading_subcommands(CLI::App& app, Options& o, const Chooser& chosen) {
  CLI::App* list = app.add_subcommand("list",
                                      "List the checkpoints in directories of "
                                      "checkpoints: step, tier, world size, size, status, and "
                                      "the one a resuming job would take");
  list->add_option("DIR", o.list.dirs,
                   "Directories of checkpoints (etr-train's "
                   "checkpoint.dir, checkpoint.fast_dir)")
      ->required();
  list->add_flag("--quick", o.list.quick, "Skip the checksums: only read the manifests");
  list->callback(chosen([&o] { return run_list(o.list); }));

  CLI::App* show = app.add_subcommand("show",
                                      "Print a checkpoint's manifest: position, "
                                      "layout, files, tensors, configuration");
  show->add_option("CKPT", o.show, "A checkpoint directory (step-NNNNNNNNN)")->required();
  show->callback(chosen([&o] { return run_show(o.show); }));

  CLI::App* verify = app.add_subcommand("verify",
                                        "Check a checkpoint: its manifest, and the "
                                        "size and XXH3 checksum of every shard file");
  verify->add_option("CKPT", o.verify, "A checkpoint directory (step-NNNNNNNNN)")->required();
  verify->callback(chosen([&o] { return run_verify(o.verify); }));

  CLI::App* exp = app.add_subcommand("export",
                                     "Write a checkpoint's parameters as Hugging "
                                     "Face GPT-2 weights (safetensors)");
  exp->add_option("CKPT", o.export_.checkpoint, "A checkpoint saved by etr-train")->required();
  exp->add_option("-o,--output", o.export_.out,
                  "The .safetensors file to write; a directory "
                  "(existing, or ending in '/') gets model.safetensors and config.json, which "
                  "GPT2LMHeadModel.from_pretrained loads")
      ->required();
  exp->callback(chosen([&o] { return run_export(o.export_); }));
}

// The subcommands that write checkpoints or move them: restore, rollback, reshard, prune.
void add_writing_subcommands(CLI::App& app, Options& o, const Chooser& chosen) {
  CLI::App* restore = app.add_subcommand("restore",
                                         "Copy a checkpoint into a directory of "
                                         "checkpoints (verified, durably) and move the newer "
                                         "ones there aside, so that a job resuming from it "
                                         "takes this one");
  restore->add_option("CKPT", o.restore.checkpoint, "The checkpoint to restore")->required();
  restore
      ->add_option("--to", o.restore.to,
                   "The directory of checkpoints a job resumes "
                   "from")
      ->required();
  restore->callback(chosen([&o] { return run_restore(o.restore); }));

  CLI::App* rollback = app.add_subcommand("rollback",
                                          "Move the checkpoints newer than a step "
                                          "aside (into DIR/rolled-back-<unix ms>/, not "
                                          "deleted), in every directory given");
  rollback
      ->add_option("DIR", o.rollback.dirs,
                   "Directories of checkpoints; at least one must "
                   "hold the step, complete and verified")
      ->required();
  rollback->add_option("--step", o.rollback.step, "The step to go back to")->required();
  rollback->callback(chosen([&o] { return run_rollback(o.rollback); }));

  CLI::App* reshard = app.add_subcommand("reshard",
                                         "Rewrite a checkpoint for another world "
                                         "size: OUT/step-NNNNNNNNN, every state, the same "
                                         "values");
  reshard->add_option("CKPT", o.reshard.checkpoint, "The checkpoint to reshard")->required();
  reshard->add_option("--world", o.reshard.world, "Ranks of the new layout")->required();
  reshard->add_option("--zero", o.reshard.zero, "ZeRO stage recorded in the new layout (0-3)")
      ->capture_default_str();
  reshard->add_option("--pp", o.reshard.pp, "Pipeline stages recorded in the new layout (--world must be a multiple)")
      ->capture_default_str();
  reshard
      ->add_option("-o,--output", o.reshard.out,
                   "Directory of checkpoints to write the "
                   "new one into")
      ->required();
  reshard->callback(chosen([&o] { return run_reshard(o.reshard); }));

  CLI::App* prune = app.add_subcommand("prune",
                                       "Delete all but the newest K complete "
                                       "checkpoints (and unfinished saves older than them)");
  prune->add_option("DIR", o.prune.dir, "A directory of checkpoints")->required();
  prune->add_option("--keep", o.prune.keep, "Complete checkpoints to keep (at least 1)")
      ->required();
  prune->callback(chosen([&o] { return run_prune(o.prune); }));
}

// Adds the subcommands to `app`, in the order of --help; each sets `run` when chosen.
void add_subcommands(CLI::App& app, Options& o, std::function<int()>& run) {
  const Chooser chosen = [&run](std::function<int()> f) {
    return std::function<void()>([&run, f] { run = f; });
  };
  add_reading_subcommands(app, o, chosen);
  add_writing_subcommands(app, o, chosen);
}

}  // namespace

int main(int argc, char** argv) {
  // A file-size limit must fail a write with EFBIG (an IoError) instead of killing us.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"etr-ckpt: inspects, checks, restores, reshards and exports etr checkpoints.",
               "etr-ckpt"};
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "etr-ckpt: error: " + std::string(e.what()) +
           "\nRun with --help for more "
           "information.\n";
  });
  app.require_subcommand(1);
  Options options;
  std::function<int()> run;
  add_subcommands(app, options, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a success; every other parse error is a usage error (status 2).
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return run ? run() : 2;
  } catch (const etr::Error& e) {
    etr::print_error("etr-ckpt", e.what());
    return 1;
  } catch (const std::exception& e) {
    etr::print_error("etr-ckpt", e.what(), "internal error");
    return 1;
  }
}
