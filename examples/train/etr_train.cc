// etr-train: trains the example GPT-2 (README.md, "etr-train").
//
//   etr-train --config configs/demo.pbtxt [--set model.n_layer=2 ...] [--trace FILE]
//             [--resume DIR|latest] [--print-config]
//   mpirun -np 4 etr-train ...          data parallel: one replica per rank
//   etr-run --min-np 1 --max-np 4 ... -- etr-train ...   elastic (launcher/)
//
// The program is etr's training-program skeleton (parallel/program.h: command line,
// configuration, errors and exit codes) around the GPT-2 factory and its callbacks
// (gpt_program.h). The effective configuration is printed once at start; a progress
// line every log.log_every steps; the held-out loss every log.eval_every steps; a
// generated sample and a summary at the end.
#include <memory>

#include "examples/train/gpt_program.h"
#include "parallel/program.h"

int main(int argc, char** argv) {
  // model.vocab_size as the user gave it: the vocabulary of an llm.c or nanoGPT file.
  auto given = std::make_shared<etr::gpt::GivenSizes>();
  return etr::run_training_program(argc, argv, etr::gpt::training_program_info(given),
                                   etr::gpt::training_program(given));
}
