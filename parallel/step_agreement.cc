#include "parallel/step_agreement.h"

namespace etr {

void StepAgreement::agree(const Sum& sum, int n) {
  double v[11] = {loss,
                  resize ? 1.0 : 0.0,
                  nonfinite_norm ? 1.0 : 0.0,
                  replan ? 1.0 : 0.0,
                  out_of_memory ? 1.0 : 0.0,
                  bubble,
                  norm_wait_seconds,
                  goodput_term,
                  compute_seconds,
                  optimizer_seconds,
                  stop ? 1.0 : 0.0};
  sum(v, 11);
  loss = v[0];
  resize = v[1] > 0;
  nonfinite_norm = v[2] > 0;
  replan = v[3] > 0;
  out_of_memory = v[4] > 0;
  bubble = v[5];
  norm_wait_seconds = v[6];
  goodput_term = v[7];
  compute_seconds = v[8];
  optimizer_seconds = v[9];
  stop = v[10] > 0;
  ranks = n;
}

}  // namespace etr
