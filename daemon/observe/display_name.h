// DisplayName: a tensor's name as kolod shows it to people (Status, stalls,
// timelines). A later part of a tensor sent in parts is named with the
// ASCII unit separator (abi kPartSeparator), which no tensor's name holds;
// it shows as '#': "grad/w#3".
#pragma once

#include <algorithm>
#include <string>

#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo::daemon {

inline std::string DisplayName(std::string name) {
  std::replace(name.begin(), name.end(), abi::v1::kPartSeparator, '#');
  return name;
}

}  // namespace kolo::daemon
