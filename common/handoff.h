// The identity handoff: before a client attaches over gRPC, it connects to
// kolod's handoff socket (a SOCK_SEQPACKET Unix socket beside the gRPC
// socket), sends one request and, attached to it with SCM_RIGHTS, its
// session segment. kolod learns the caller's pid, uid and gid from the kernel
// (SO_PEERCRED), checks the descriptor, and answers with a one-time ticket
// that the Attach call presents. Nothing about who the caller is, or which
// memory it shares, is ever taken from a request.
//
// The request without a descriptor asks for an identity ticket only (e.g.
// for koloctl, so kolod can show a user their own jobs).
//
// Wire format, one message each way:
//   request: "KOLO-HANDOFF 1"
//   reply:   "OK <ticket>" or "ERR <status code number> <message>"
//
// Thread-safety: free functions.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kolo {

inline constexpr absl::string_view kHandoffRequest = "KOLO-HANDOFF 1";
// The gRPC metadata key that carries a ticket: on Attach, the session's
// one-time ticket; on Status calls, an identity ticket.
inline constexpr char kHandoffMetadata[] = "kolo-handoff";
// Replies are short: a ticket, or one error line.
inline constexpr size_t kMaxHandoffMessageBytes = 512;
// Tickets are 128 random bits in hex.
inline constexpr size_t kHandoffTicketChars = 32;

// The handoff socket that belongs to the gRPC socket `socket_path`.
std::string HandoffSocketPath(absl::string_view socket_path);

// A handoff that kolod refuses for load (RESOURCE_EXHAUSTED: too many in
// progress, of the caller's uid or in total) or closes unanswered, or whose
// connect finds a full backlog, is tried again with a backoff growing to
// kHandoffMaxBackoff, for at most kHandoffRetryFor (and never past the
// caller's timeout).
inline constexpr absl::Duration kHandoffRetryFor = absl::Seconds(5);
inline constexpr absl::Duration kHandoffMaxBackoff = absl::Milliseconds(250);

// Hands `fd` (or, when it is -1, nothing but the caller's identity) to the
// kolod whose handoff socket is `handoff_path`; returns the ticket. Retries
// as above; the error after the last try names the socket, how many tries
// and the last refusal. `timeout` bounds the whole call.
absl::StatusOr<std::string> HandOff(const std::string& handoff_path, int fd,
                                    absl::Duration timeout);

// The reply formats, shared by both ends.
std::string HandoffOkReply(absl::string_view ticket);
std::string HandoffErrorReply(const absl::Status& status);
absl::StatusOr<std::string> ParseHandoffReply(absl::string_view reply);

}  // namespace kolo
