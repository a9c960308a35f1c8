#include "client/kolorun/line_prefixer.h"

#include <algorithm>
#include <utility>

namespace kolo::kolorun {

LinePrefixer::LinePrefixer(std::string prefix, Sink sink, size_t max_line_bytes)
    : prefix_(std::move(prefix)),
      sink_(std::move(sink)),
      max_line_bytes_(std::max<size_t>(max_line_bytes, 1)) {}

void LinePrefixer::AppendLine(std::string_view line, std::string* out) const {
  out->append(prefix_);
  out->append(line);
  out->push_back('\n');
}

void LinePrefixer::Append(std::string_view bytes) {
  std::string out;
  while (!bytes.empty()) {
    const size_t newline = bytes.find('\n');
    if (newline == std::string_view::npos) {
      partial_.append(bytes);
      break;
    }
    if (partial_.empty()) {
      AppendLine(bytes.substr(0, newline), &out);
    } else {
      partial_.append(bytes.substr(0, newline));
      AppendLine(partial_, &out);
      partial_.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
  // Cut an overlong partial line into pieces; the remainder stays pending.
  size_t cut = 0;
  while (partial_.size() - cut >= max_line_bytes_) {
    AppendLine(std::string_view(partial_).substr(cut, max_line_bytes_), &out);
    cut += max_line_bytes_;
  }
  if (cut > 0) partial_.erase(0, cut);
  if (!out.empty()) sink_(out);
}

void LinePrefixer::Flush() {
  if (partial_.empty()) return;
  std::string out;
  AppendLine(partial_, &out);
  partial_.clear();
  sink_(out);
}

}  // namespace kolo::kolorun
