// LinePrefixer: turns a child's byte stream (a pipe read in arbitrary chunks)
// into whole lines, each preceded by a fixed prefix such as "[3] ".
//
// Thread-safety: not thread-safe; one owner thread feeds and flushes it.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace kolo::kolorun {

class LinePrefixer {
 public:
  // Receives one or more whole prefixed lines, each ending in '\n', per call;
  // a line is never split across calls, so a sink that writes each call with
  // one write() keeps lines from different streams from interleaving.
  using Sink = std::function<void(std::string_view lines)>;

  // A line longer than `max_line_bytes` (without its newline) is emitted in
  // pieces of that size, each prefixed and newline-terminated: a stream that
  // never writes a newline cannot grow the buffer without bound.
  static constexpr size_t kDefaultMaxLineBytes = size_t{64} << 10;

  LinePrefixer(std::string prefix, Sink sink, size_t max_line_bytes = kDefaultMaxLineBytes);
  LinePrefixer(const LinePrefixer&) = delete;
  LinePrefixer& operator=(const LinePrefixer&) = delete;

  // Emits every line that `bytes` completes; keeps a trailing partial line
  // until a later Append or Flush.
  void Append(std::string_view bytes);

  // Emits the pending partial line, if any, with a newline added (for the end
  // of a stream whose last line has none). Calling it again does nothing.
  void Flush();

  bool has_partial_line() const { return !partial_.empty(); }

 private:
  void AppendLine(std::string_view line, std::string* out) const;

  const std::string prefix_;
  const Sink sink_;
  const size_t max_line_bytes_;
  std::string partial_;  // Bytes after the last newline seen.
};

}  // namespace kolo::kolorun
