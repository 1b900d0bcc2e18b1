// runtime/elastic.h's signal flags: the resize request (SIGUSR1) and the stop request
// (SIGUSR2; SIGTERM or SIGINT caught once, and not under etr-run). Each test raises the
// signal in this process: without the handler it would end the test binary.
#include <gtest/gtest.h>

#include <csignal>

#include "runtime/elastic.h"

namespace etr {
namespace {

// ---- runtime/elastic: the stop flag (SIGUSR2; SIGTERM and SIGINT once) --------------

// The disposition of `sig` now.
void (*handler_of(int sig))(int) {
  struct sigaction now = {};
  sigaction(sig, nullptr, &now);
  return now.sa_handler;
}

TEST(StopSignal, TheFirstSignalIsKeptAndTermOrIntIsCaughtOnce) {
  signal(SIGINT, SIG_DFL);
  install_stop_signal_handler();
  clear_stop_request();
  EXPECT_EQ(stop_signal(), 0);
  ASSERT_EQ(std::raise(SIGUSR2), 0);  // would end the process without the handler
  EXPECT_EQ(stop_signal(), SIGUSR2);
  EXPECT_NE(handler_of(SIGUSR2), SIG_DFL) << "SIGUSR2 stays caught";
  ASSERT_EQ(std::raise(SIGTERM), 0);
  EXPECT_EQ(stop_signal(), SIGUSR2) << "the first signal is the one kept";
  EXPECT_EQ(handler_of(SIGTERM), SIG_DFL) << "a second SIGTERM would end the process";
  EXPECT_EQ(handler_of(SIGINT), SIG_DFL) << "so would a SIGINT after the SIGTERM";
  install_stop_signal_handler();
  clear_stop_request();
  ASSERT_EQ(std::raise(SIGINT), 0);
  EXPECT_EQ(stop_signal(), SIGINT);
  EXPECT_EQ(handler_of(SIGINT), SIG_DFL);
  EXPECT_EQ(handler_of(SIGTERM), SIG_DFL);
  clear_stop_request();
  signal(SIGUSR2, SIG_DFL);
}

TEST(StopSignal, ASignalIgnoredAtTheStartStaysIgnored) {
  signal(SIGINT, SIG_IGN);  // as nohup, or a shell's background job
  signal(SIGTERM, SIG_DFL);
  install_stop_signal_handler();
  EXPECT_EQ(handler_of(SIGINT), SIG_IGN);
  EXPECT_NE(handler_of(SIGTERM), SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGUSR2, SIG_DFL);
}

TEST(StopSignal, UnderEtrRunOnlySigusr2IsCaught) {
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  install_stop_signal_handler(/*term_and_int=*/false);
  EXPECT_NE(handler_of(SIGUSR2), SIG_DFL);
  EXPECT_EQ(handler_of(SIGTERM), SIG_DFL) << "mpirun's teardown must end a rank at once";
  EXPECT_EQ(handler_of(SIGINT), SIG_DFL);
  signal(SIGUSR2, SIG_DFL);
}

// ---- runtime/elastic: the SIGUSR1 resize flag -----------------------------------------

TEST(ResizeSignal, Sigusr1SetsTheFlagUntilCleared) {
  install_resize_signal_handler();
  clear_resize_request();
  EXPECT_FALSE(resize_requested());
  ASSERT_EQ(std::raise(SIGUSR1), 0);  // would end the process without the handler
  EXPECT_TRUE(resize_requested());
  EXPECT_TRUE(resize_requested());  // stays set when read
  clear_resize_request();
  EXPECT_FALSE(resize_requested());
  ASSERT_EQ(std::raise(SIGUSR1), 0);
  EXPECT_TRUE(resize_requested());
  clear_resize_request();
}

}  // namespace
}  // namespace etr
