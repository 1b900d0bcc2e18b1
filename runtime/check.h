// Invariant checks that throw etr::Error naming the condition, the values and file:line.
//
//   ETR_CHECK(n > 0) << "need at least one element";
//   ETR_CHECK_EQ(a.size(), b.size());   // prints both values
//
// The library-call checks (MPI_CHECK, CUDA_CHECK, NCCL_CHECK, CUBLAS_CHECK) live in
// mpi_check.h and cuda_check.h so that this header needs neither MPI nor CUDA.
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "runtime/error.h"

namespace etr::detail {

// Collects an optional streamed message and throws from its destructor's caller
// (the `throw_now` at the end of the full expression).
class CheckFailure {
 public:
  CheckFailure(const std::string& what, const char* file, int line) {
    stream_ << what << " failed at " << file << ":" << line;
  }
  template <typename T>
  CheckFailure& operator<<(const T& v) {
    if (!has_message_) {
      stream_ << ": ";
      has_message_ = true;
    }
    stream_ << v;
    return *this;
  }
  [[noreturn]] void throw_now() const { throw Error(stream_.str()); }

 private:
  std::ostringstream stream_;
  bool has_message_ = false;
};

// Makes `ETR_CHECK(c) << "msg";` throw after the message is streamed.
struct CheckThrower {
  [[noreturn]] void operator&(const CheckFailure& f) const { f.throw_now(); }
};

// Compares a and b with `op` ("==", "<", ...); integers of mixed signedness compare by
// value (std::cmp_*), so `ETR_CHECK_EQ(vec.size(), n)` needs no casts. Returns the failure
// description, or nothing when the comparison holds.
template <typename A, typename B>
std::optional<std::string> check_op(const A& a, const B& b, char op, bool or_equal,
                                    const char* ea, const char* eb, const char* op_text) {
  bool ok;
  if constexpr (std::is_integral_v<A> && std::is_integral_v<B> && !std::is_same_v<A, bool> &&
                !std::is_same_v<B, bool>) {
    ok = op == '=' ? (or_equal ? std::cmp_equal(a, b) : std::cmp_not_equal(a, b))
         : op == '<' ? (or_equal ? std::cmp_less_equal(a, b) : std::cmp_less(a, b))
                     : (or_equal ? std::cmp_greater_equal(a, b) : std::cmp_greater(a, b));
  } else {
    ok = op == '=' ? (or_equal ? a == b : a != b)
         : op == '<' ? (or_equal ? a <= b : a < b)
                     : (or_equal ? a >= b : a > b);
  }
  if (ok) return std::nullopt;
  std::ostringstream s;
  s << "check " << ea << " " << op_text << " " << eb << " (" << a << " vs " << b << ")";
  return s.str();
}

}  // namespace etr::detail

#define ETR_CHECK(cond)                                     \
  if (__builtin_expect(static_cast<bool>(cond), 1)) {       \
  } else                                                    \
    ::etr::detail::CheckThrower() &                         \
        ::etr::detail::CheckFailure("check " #cond, __FILE__, __LINE__)

#define ETR_CHECK_OP_(a, b, op, or_equal, text)                                       \
  if (auto etr_check_msg_ = ::etr::detail::check_op((a), (b), op, or_equal, #a, #b, text); \
      __builtin_expect(!etr_check_msg_, 1)) {                                           \
  } else                                                                                \
    ::etr::detail::CheckThrower() &                                                     \
        ::etr::detail::CheckFailure(*etr_check_msg_, __FILE__, __LINE__)

#define ETR_CHECK_EQ(a, b) ETR_CHECK_OP_(a, b, '=', true, "==")
#define ETR_CHECK_NE(a, b) ETR_CHECK_OP_(a, b, '=', false, "!=")
#define ETR_CHECK_LE(a, b) ETR_CHECK_OP_(a, b, '<', true, "<=")
#define ETR_CHECK_LT(a, b) ETR_CHECK_OP_(a, b, '<', false, "<")
#define ETR_CHECK_GE(a, b) ETR_CHECK_OP_(a, b, '>', true, ">=")
#define ETR_CHECK_GT(a, b) ETR_CHECK_OP_(a, b, '>', false, ">")
