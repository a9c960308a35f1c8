#include "client/visible_devices.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kolo::client {

VisibleDevices VisibleDevices::Parse(std::optional<std::string> value) {
  VisibleDevices v;
  if (!value.has_value()) return v;
  v.value_ = *value;
  std::vector<int> map;
  for (absl::string_view entry : absl::StrSplit(*value, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    int n = 0;
    if (!absl::SimpleAtoi(entry, &n) || n < 0) {
      if (entry.empty() || absl::StartsWith(entry, "-")) break;  // CUDA stops at a bad entry
      v.unusable_ = absl::InvalidArgumentError(absl::StrCat(
          "CUDA_VISIBLE_DEVICES=", *value,
          " names GPUs kolo cannot number as kolod does; "
          "use the GPUs' indices (as nvidia-smi lists them), e.g. CUDA_VISIBLE_DEVICES=3"));
      return v;
    }
    map.push_back(n);
  }
  v.map_ = std::move(map);
  return v;
}

absl::StatusOr<int> VisibleDevices::NodeOrdinal(int ordinal) const {
  if (!unusable_.ok()) return unusable_;
  if (ordinal < 0) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", ordinal, " is not a device"));
  }
  if (!map_.has_value()) return ordinal;
  if (ordinal >= static_cast<int>(map_->size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device ", ordinal, " is not visible with CUDA_VISIBLE_DEVICES=", value_));
  }
  return (*map_)[ordinal];
}

}  // namespace kolo::client
