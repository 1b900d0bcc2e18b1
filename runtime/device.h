// Where a buffer lives: host memory or one CUDA device.
#pragma once

#include <string>

namespace etr {

enum class DeviceType : uint8_t { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;  // CUDA ordinal; 0 for the host

  static constexpr Device cpu() { return {DeviceType::kCpu, 0}; }
  static constexpr Device cuda(int ordinal) { return {DeviceType::kCuda, ordinal}; }
  constexpr bool is_cpu() const { return type == DeviceType::kCpu; }
  constexpr bool is_cuda() const { return type == DeviceType::kCuda; }
  constexpr bool operator==(const Device&) const = default;
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

}  // namespace etr
