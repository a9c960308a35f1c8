// SealedLane: the negotiation's messages over a job's transport message lane
// (see member_link.h), each sealed with an HMAC-SHA256 tag under the job's
// lane key. The coordinator draws the key when it welcomes the nodes, and
// the Welcome carries it over the Peer plane (mutual TLS), so a message on
// the data plane is taken only from a daemon of the job, as the node it
// claims to be, for the node it reached, and unchanged. A message that does
// not verify is dropped with a warning; it changes nothing.
//
// It does not hide the messages (tensor data crosses the data plane in the
// clear too; see docs/security.md) and does not stop a replay of a captured
// message, which at worst fails the job, as injected data can.
//
// Thread-safety: thread-safe (the key is fixed; the lane below is).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/transport/transport.h"

namespace kolo::daemon {

inline constexpr size_t kLaneKeyBytes = 32;

// A fresh lane key from the kernel's random source.
absl::StatusOr<std::string> NewLaneKey();

class SealedLane final : public MessageLane {
 public:
  static constexpr size_t kTagBytes = 32;
  // `lane` (the transport's) must outlive this; `self` is this node's index;
  // `key` is kLaneKeyBytes long.
  static absl::StatusOr<std::unique_ptr<SealedLane>> Create(MessageLane* lane, std::string key,
                                                            int self);
  ~SealedLane() override;

  // Installs on the lane below a handler that passes on only the messages
  // that verify, without their tag.
  void SetMessageHandler(Handler handler) override;
  absl::Status SendMessage(int peer, std::shared_ptr<const std::string> message) override;
  size_t max_message_bytes() const override;

  // `message` sealed from node `from` to node `to` under this lane's key.
  std::string Seal(int from, int to, absl::string_view message);
  // `sealed` from `from` to `to`: the message, or why not.
  absl::StatusOr<absl::string_view> Open(int from, int to, absl::string_view sealed);

 private:
  struct MacState;
  SealedLane(MessageLane* lane, std::unique_ptr<MacState> mac, int self);
  // The HMAC-SHA256 of `from`, `to` (4 bytes each, little-endian) and
  // `message`; empty if OpenSSL failed.
  std::string Tag(int from, int to, absl::string_view message);

  MessageLane* const lane_;
  const std::unique_ptr<MacState> mac_;  // keyed once: a tag costs ~1 us
  const int self_;
  std::atomic<uint64_t> dropped_{0};  // logged at 1, 2, 4, 8...
};

}  // namespace kolo::daemon
