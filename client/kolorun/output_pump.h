// OutputPump: copies the output of kolorun's children (ranks, the private
// kolod, the host discovery script) from their pipes to kolorun's own
// descriptors, each line prefixed ("[3] ", "[kolod] ").
//
// Thread-safety: not thread-safe; owned by the supervising thread.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/kolorun/line_prefixer.h"
#include "client/kolorun/subprocess.h"

namespace kolo::kolorun {

// Writes all of `data` to `fd` unless the reader has gone (then the rest is
// dropped: a closed stdout must not stop the job).
void WriteAll(int fd, std::string_view data);

// Streams are tagged with an owner so that one child's streams can be drained
// or closed together: a rank's launcher serial (0, 1, ...), or one of the
// negative owners below.
class OutputPump {
 public:
  static constexpr int kDaemonOwner = -1;
  static constexpr int kDiscoveryOwner = -2;

  // Adds the non-blocking read end `fd`; its lines go to `dest_fd` (not
  // owned), each after `prefix`. With a valid `copy_fd` (owned), everything
  // read is also written there as it is, unprefixed (--output-filename).
  void Add(int owner, UniqueFd fd, const std::string& prefix, int dest_fd,
           UniqueFd copy_fd = UniqueFd());

  // Forgets the streams that are closed, so that a long job whose children
  // come and go keeps a bounded list. Renumbers the streams: call it only
  // before taking their descriptors with size() and fd().
  void DropClosed();

  size_t size() const { return streams_.size(); }
  // Stream `i`'s descriptor, -1 once it is closed (poll skips it).
  int fd(size_t i) const { return streams_[i]->fd.get(); }

  // Reads what stream `i` has now (a bounded amount, so one chatty child
  // cannot starve the others); closes it at EOF.
  void Read(size_t i);

  // Reads everything `owner`'s streams hold right now, without waiting.
  void DrainNow(int owner);

  // True while any stream of a rank (an owner >= 0) is open.
  bool AnyRankStreamOpen() const;

  // Flushes partial lines and closes the streams of `owner`, or of every
  // rank when `owner` is nullopt.
  void Close(std::optional<int> owner);

 private:
  struct Stream {
    int owner = 0;
    UniqueFd fd;
    std::unique_ptr<LinePrefixer> prefixer;
    UniqueFd copy_fd;
  };

  static void CloseStream(Stream& s);

  std::vector<std::unique_ptr<Stream>> streams_;
};

}  // namespace kolo::kolorun
