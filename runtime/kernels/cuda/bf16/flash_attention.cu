// Flash attention, bf16 (flash_attention.h): qkv [B, T, 3C], out [B, T, C], lse [B, NH, T]
// fp32 in att; dout [B, T, C], dqkv [B, T, 3C], Dsum [B, NH, T] fp32 in scratch. The
// checks and the choice of the path; the kernels are in flash_attention_forward.cu and
// flash_attention_backward.cu, their shared pieces in flash_attention_tiles.cuh.
#include "runtime/kernels/cuda/bf16/flash_attention.h"

#include <climits>
#include <cmath>
#include <cstdlib>
#include <string>

#include "runtime/error.h"
#include "runtime/kernels/cuda/bf16/flash_attention_tiles.cuh"
#include "runtime/env.h"

namespace etr::cuda {
namespace {

using flash::kBlock;
using flash::kMaxGrid;
using flash::nv;

bool env_enabled() {
  static const bool on = [] {
    const char* v = env_value("ETR_FLASH_ATTENTION");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

// Validates the sizes for the flash path; returns hs.
int64_t check_flash(const char* who, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const std::string w = std::string(who) + " (bf16 flash attention)";
  if (B < 0 || T < 0 || C <= 0 || NH <= 0 || C % NH != 0) {
    throw InvalidArgument(w + " needs B, T >= 0, C, NH > 0 and NH dividing C (B " +
                          std::to_string(B) + ", T " + std::to_string(T) + ", C " +
                          std::to_string(C) + ", NH " + std::to_string(NH) + ")");
  }
  const int64_t hs = C / NH;
  if (hs != 64 && hs != 128) {
    throw InvalidArgument(w + " supports head sizes 64 and 128, not " + std::to_string(hs));
  }
  if (B > kMaxGrid || NH > kMaxGrid || T > INT_MAX - kBlock) {
    throw InvalidArgument(w + ": B = " + std::to_string(B) + " or NH = " + std::to_string(NH) +
                          " above 65535, or T = " + std::to_string(T) + " too large");
  }
  return hs;
}

void check_aligned(const char* who, const void* p, const char* name, uintptr_t bytes) {
  if (reinterpret_cast<uintptr_t>(p) % bytes != 0) {
    throw InvalidArgument(std::string(who) + " (bf16 flash attention) needs " + name +
                          " aligned to " + std::to_string(bytes) +
                          " bytes (the allocator's buffers are)");
  }
}

int64_t stats_numel(int64_t B, int64_t T, int64_t NH) {
  return (2 * B * NH * T + 7) / 8 * 8;  // fp32 [B, NH, T] as bf16 elements, to 16 bytes
}

}  // namespace

bool flash_attention_enabled(int64_t C, int64_t NH) {
  if (!env_enabled() || C <= 0 || NH <= 0 || C % NH != 0) return false;
  return C / NH == 64 || C / NH == 128;
}

int64_t flash_attention_saved_numel(int64_t B, int64_t T, int64_t C, int64_t NH) {
  check_flash("attention_saved_numel", B, T, C, NH);
  return stats_numel(B, T, NH);
}

int64_t flash_attention_backward_scratch_size(int64_t B, int64_t T, int64_t C, int64_t NH) {
  check_flash("attention_backward_scratch_size", B, T, C, NH);
  return stats_numel(B, T, NH);
}

void flash_attention_forward(bf16* out, bf16* att, const bf16* qkv, int64_t B, int64_t T, int64_t C,
                             int64_t NH, cudaStream_t stream) {
  const char* who = "attention_forward";
  const int64_t hs = check_flash(who, B, T, C, NH);
  if (B == 0 || T == 0) return;
  check_aligned(who, out, "out", 16);
  check_aligned(who, qkv, "qkv", 16);
  check_aligned(who, att, "att", 4);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* lse = reinterpret_cast<float*>(att);
  flash::launch_forward(static_cast<int>(hs), nv(out), lse, nv(qkv), B, T, C, NH, scale, stream);
}

void flash_attention_backward(bf16* dqkv, bf16* scratch, int64_t scratch_size, const bf16* dout,
                              const bf16* qkv, const bf16* att, const bf16* out, int64_t B,
                              int64_t T, int64_t C, int64_t NH, cudaStream_t stream) {
  const char* who = "attention_backward";
  const int64_t hs = check_flash(who, B, T, C, NH);
  if (B == 0 || T == 0) return;
  const int64_t need = stats_numel(B, T, NH);
  if (scratch == nullptr || scratch_size < need) {
    throw InvalidArgument("attention_backward (bf16 flash attention) needs at least " +
                          std::to_string(need) + " elements of scratch (2 B NH T), got " +
                          std::to_string(scratch == nullptr ? 0 : scratch_size));
  }
  check_aligned(who, dqkv, "dqkv", 16);
  check_aligned(who, dout, "dout", 16);
  check_aligned(who, qkv, "qkv", 16);
  check_aligned(who, out, "out", 16);
  check_aligned(who, att, "att", 4);
  check_aligned(who, scratch, "scratch", 4);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* dsum = reinterpret_cast<float*>(scratch);
  const float* lse = reinterpret_cast<const float*>(att);
  flash::launch_backward(static_cast<int>(hs), nv(dqkv), dsum, nv(dout), nv(qkv), lse, nv(out), B,
                         T, C, NH, scale, stream);
}

}  // namespace etr::cuda