// FuzzInput: takes typed values off the front of a fuzz input. Past the end
// every value reads as zero (and strings as empty), so a target never has to
// check the length itself. A small stand-in for libFuzzer's
// FuzzedDataProvider that also builds with gcc (for the corpus replays).
//
// Thread-safety: one thread per instance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

namespace kolo::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t remaining() const { return size_ - pos_; }
  bool empty() const { return pos_ == size_; }

  // The next sizeof(T) bytes as a T (zero-filled past the end).
  template <typename T>
  T Take() {
    static_assert(std::is_trivially_copyable_v<T>);
    T value{};
    TakeBytes(&value, sizeof(T));
    return value;
  }

  // Copies up to `n` bytes into `out`, zero-filling what the input lacks.
  void TakeBytes(void* out, size_t n) {
    size_t have = n < remaining() ? n : remaining();
    if (have > 0) std::memcpy(out, data_ + pos_, have);
    if (have < n) std::memset(static_cast<uint8_t*>(out) + have, 0, n - have);
    pos_ += have;
  }

  // A string of a length given by the next byte (at most `max_bytes`).
  std::string TakeString(size_t max_bytes = 255) {
    size_t n = Take<uint8_t>();
    if (n > max_bytes) n = max_bytes;
    if (n > remaining()) n = remaining();
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }

  // A small signed value (one byte) most of the time; with `raw`, any 64-bit
  // value.
  int64_t TakeSmall(bool raw) {
    return raw ? Take<int64_t>() : static_cast<int64_t>(Take<int8_t>());
  }

  // Everything left, as a string.
  std::string TakeRest() {
    std::string s(reinterpret_cast<const char*>(data_ + pos_), remaining());
    pos_ = size_;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// A target's oracle: a violated property aborts, which libFuzzer (and the
// corpus replay) reports as a crash with the input that caused it.
inline void Require(bool property) {
  if (!property) std::abort();
}

}  // namespace kolo::fuzz

// Defines the libFuzzer entry point to run `run(kolo::fuzz::FuzzInput&)` on
// each input.
#define KOLO_FUZZ_TARGET(run)                                               \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    ::kolo::fuzz::FuzzInput in(data, size);                                 \
    run(in);                                                                \
    return 0;                                                               \
  }
