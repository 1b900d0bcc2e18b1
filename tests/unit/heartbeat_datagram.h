// One datagram to a heartbeat watch's port on loopback, as a rank's heartbeat thread sends
// it (runtime/heartbeat.h): the launcher tests' stand-in for a rank.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace etr::launcher {

// `target` is the watch's "address:port" (HeartbeatWatch::target).
inline void send_datagram(const std::string& target, const std::string& text) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::stoi(target.substr(target.rfind(':') + 1))));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  ASSERT_EQ(sendto(fd, text.data(), text.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
            static_cast<ssize_t>(text.size()));
  close(fd);
}

}  // namespace etr::launcher
