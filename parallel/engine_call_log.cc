#include "parallel/engine_call_log.h"

#include "runtime/allocator.h"
#include "runtime/error.h"

namespace etr {

void EngineCallLog::begin_step(int micro_batches) {
  micro_batches_ = micro_batches;
  made_ = 0;
}

StackHooks EngineCallLog::hooks() {
  StackHooks h;
  h.before_forward = [this](int layer) {
    engine_.before_forward(layer);
    ++made_;
  };
  h.before_backward = [this](int layer) {
    engine_.before_backward(layer);
    ++made_;
  };
  h.after_backward = [this](int layer) { after_backward(layer); };
  return h;
}

void EngineCallLog::begin_backward(bool last) {
  engine_.begin_backward(last);
  ++made_;
}

void EngineCallLog::after_backward(int layer) {
  const bool last_micro_batch = made_ >= per_micro_batch() * (micro_batches_ - 1);
  if (layer == fail_layer_ && last_micro_batch) {
    fail_layer_ = -1;
    throw OutOfMemory("out of memory inside backward of layer " + std::to_string(layer) +
                      " (ETR_OOM_IN_BACKWARD_AT_STEP, a test's fault)",
                      0, 0, 0, 0);
  }
  engine_.layer_grads_final(layer);
  ++made_;
}

void EngineCallLog::make(int64_t index) {
  const int64_t per = per_micro_batch();
  const int m = static_cast<int>(index / per);
  const int64_t p = index % per;
  const int L = layers_;
  if (p < L) return engine_.before_forward(static_cast<int>(p));
  if (p == L) return engine_.begin_backward(m + 1 == micro_batches_);
  const int64_t q = p - L - 1;
  const int layer = L - 1 - static_cast<int>(q / 2);
  if (q % 2 == 0) return engine_.before_backward(layer);
  engine_.layer_grads_final(layer);
}

void EngineCallLog::complete() {
  const int64_t total = per_micro_batch() * micro_batches_;
  for (; made_ < total; ++made_) make(made_);
}

}  // namespace etr
