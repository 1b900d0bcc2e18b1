#include "runtime/kernels/cuda/bf16/cublaslt.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "runtime/cuda_check.h"

namespace etr::cuda {
namespace {

// The thread's handles by device; destroyed with the thread (errors ignored: at process
// exit the driver may be gone already).
struct LtHandles {
  std::unordered_map<int, cublasLtHandle_t> by_device;
  ~LtHandles() {
    for (auto& [device, handle] : by_device) (void)cublasLtDestroy(handle);
  }
};

int current_device() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// The largest power of two dividing the address, at most 256 (cuBLASLt's default
// assumption, which a pointer into a flat buffer need not meet).
uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// Everything cublasLtMatmulAlgoGetHeuristic sees of a product (see cublaslt.h).
struct PlanKey {
  int device;
  bool trans_a, trans_b;
  int a_type, b_type, d_type;
  int64_t a_rows, a_cols, a_ld, b_rows, b_cols, b_ld, d_rows, d_cols, d_ld;
  uint32_t beta_bits;
  int epilogue;
  bool has_bias, has_aux;
  int bias_type;
  int64_t aux_ld;
  uint32_t align_a, align_b, align_d, align_bias, align_aux;
  uint64_t workspace_bytes;
  auto operator<=>(const PlanKey&) const = default;
};

PlanKey plan_key(int device, const LtProduct& p, const void* A, const void* B, const void* D,
                 size_t workspace_bytes) {
  PlanKey k{};
  k.device = device;
  k.trans_a = p.trans_a;
  k.trans_b = p.trans_b;
  k.a_type = static_cast<int>(p.a.type);
  k.b_type = static_cast<int>(p.b.type);
  k.d_type = static_cast<int>(p.d.type);
  k.a_rows = p.a.rows, k.a_cols = p.a.cols, k.a_ld = p.a.ld;
  k.b_rows = p.b.rows, k.b_cols = p.b.cols, k.b_ld = p.b.ld;
  k.d_rows = p.d.rows, k.d_cols = p.d.cols, k.d_ld = p.d.ld;
  std::memcpy(&k.beta_bits, &p.beta, sizeof(k.beta_bits));
  k.epilogue = static_cast<int>(p.epilogue);
  k.has_bias = p.bias != nullptr;
  k.has_aux = p.aux != nullptr;
  k.bias_type = k.has_bias ? static_cast<int>(p.bias_type) : 0;
  k.aux_ld = k.has_aux ? p.aux_ld : 0;
  k.align_a = alignment(A);
  k.align_b = alignment(B);
  k.align_d = alignment(D);
  k.align_bias = k.has_bias ? alignment(p.bias) : 0;
  k.align_aux = k.has_aux ? alignment(p.aux) : 0;
  k.workspace_bytes = workspace_bytes;
  return k;
}

// The heuristic's answer for a key: its first algorithm, or none (found false).
struct Choice {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

// A thread's descriptors of one product, and the process's choice for its key.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  Choice choice;
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d) (void)cublasLtMatrixLayoutDestroy(d);
    if (b) (void)cublasLtMatrixLayoutDestroy(b);
    if (a) (void)cublasLtMatrixLayoutDestroy(a);
    if (op) (void)cublasLtMatmulDescDestroy(op);
  }
};

// Destroys a preference, also when a check throws.
struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  ~Preference() {
    if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
  }
};

cublasLtMatrixLayout_t layout(const LtMatrix& x) {
  cublasLtMatrixLayout_t l = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, x.type, static_cast<uint64_t>(x.rows),
                                          static_cast<uint64_t>(x.cols), x.ld));
  return l;
}

template <typename T>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, T v) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v)));
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, T v) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attr, &v, sizeof(v)));
}

// The call's pointers on the descriptor (they are not part of the key).
void set_pointers(cublasLtMatmulDesc_t op, const LtProduct& p) {
  if (p.bias != nullptr) set_desc(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  if (p.aux != nullptr) set_desc(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
}

std::unique_ptr<Plan> make_plan(const LtProduct& p) {
  auto plan = std::make_unique<Plan>();
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    set_desc(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, p.epilogue);
  }
  if (p.bias != nullptr) {
    set_desc(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(p.bias_type));
  }
  if (p.aux != nullptr) set_desc(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.aux_ld);
  set_pointers(plan->op, p);
  plan->a = layout(p.a);
  plan->b = layout(p.b);
  plan->d = layout(p.d);
  return plan;
}

// The heuristic's first algorithm for the plan's descriptors and the key's alignments.
Choice run_heuristic(cublasLtHandle_t handle, const Plan& plan, const PlanKey& key) {
  Preference pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.pref));
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, key.workspace_bytes);
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a);
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b);
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d);
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  // NOT_SUPPORTED (a type, layout or epilogue combination it lacks) counts as none found.
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle, plan.op, plan.a, plan.b, plan.d, plan.d, pref.pref, 1, &heuristic, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return {};
  CUBLAS_CHECK(status);
  if (found == 0) return {};
  return {true, heuristic.algo};
}

// The process's choice for a key: the first thread to need it runs the heuristic (outside
// the lock); a second thread racing it gets the same answer, and the first one stored wins.
Choice choose(cublasLtHandle_t handle, const Plan& plan, const PlanKey& key) {
  static std::mutex mu;
  static std::map<PlanKey, Choice> choices;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = choices.find(key);
    if (it != choices.end()) return it->second;
  }
  const Choice choice = run_heuristic(handle, plan, key);
  std::lock_guard<std::mutex> lock(mu);
  return choices.emplace(key, choice).first->second;
}

}  // namespace

cublasLtHandle_t cublaslt_handle() {
  thread_local LtHandles handles;
  const int device = current_device();
  auto it = handles.by_device.find(device);
  if (it == handles.by_device.end()) {
    cublasLtHandle_t h = nullptr;
    CUBLAS_CHECK(cublasLtCreate(&h));
    it = handles.by_device.emplace(device, h).first;
  }
  return it->second;
}

LtWorkspace cublaslt_workspace(cudaStream_t stream) {
  // Never freed (see cublaslt.h); the mutex guards the map, not the memory, whose use
  // is ordered by its stream.
  static std::mutex mu;
  static std::map<std::pair<int, cudaStream_t>, void*> by_stream;
  const int device = current_device();
  std::lock_guard<std::mutex> lock(mu);
  void*& p = by_stream[{device, stream}];
  if (p == nullptr) CUDA_CHECK(cudaMalloc(&p, kLtWorkspaceBytes));
  return {p, kLtWorkspaceBytes};
}

bool cublaslt_matmul(cudaStream_t stream, const LtProduct& p, const void* A, const void* B,
                     void* D) {
  // The thread's plans: descriptors are not shared between threads, since each call sets
  // its own epilogue pointers on them.
  thread_local std::map<PlanKey, std::unique_ptr<Plan>> plans;
  const LtWorkspace ws = cublaslt_workspace(stream);
  const PlanKey key = plan_key(current_device(), p, A, B, D, ws.bytes);
  cublasLtHandle_t handle = cublaslt_handle();
  auto it = plans.find(key);
  if (it == plans.end()) {
    std::unique_ptr<Plan> plan = make_plan(p);
    plan->choice = choose(handle, *plan, key);
    it = plans.emplace(key, std::move(plan)).first;
  } else {
    set_pointers(it->second->op, p);
  }
  const Plan& plan = *it->second;
  if (!plan.choice.found) return false;
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle, plan.op, &alpha, A, plan.a, B, plan.b, &p.beta, D, plan.d, D,
                              plan.d, &plan.choice.algo, ws.ptr, ws.bytes, stream));
  return true;
}

}  // namespace etr::cuda
