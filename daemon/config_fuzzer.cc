// Fuzzes the parsing of what an operator gives kolod: ParseBytes and
// ParseSeconds on arbitrary text, ApplyEnvironment with fuzzed values of the
// KOLO_* variables, then ResolvePeerPlane and IsLoopbackAddress on a config
// whose addresses and TLS settings come from the input. A parsed value must
// be what the text says in range (no negative durations, no wrapped byte
// counts); nothing may crash whatever the text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "daemon/config.h"
#include "tools/fuzz/fuzz_input.h"

namespace kolo::daemon {
namespace {

constexpr const char* kVariables[] = {
    "KOLO_FUSION_THRESHOLD", "KOLO_LOG_LEVEL",       "KOLO_NCCL_INIT_TIMEOUT_S",
    "KOLO_NCCL_TIMEOUT_S",   "KOLO_PEER_TIMEOUT_S",  "KOLO_SOCKET",
    "KOLO_SPIN_US",          "KOLO_STALL_TIMEOUT_S", "KOLO_STALL_WARNING_S",
};

void Run(fuzz::FuzzInput& in) {
  const std::string text = in.TakeString(64);
  absl::StatusOr<uint64_t> bytes = ParseBytes(text);
  absl::StatusOr<absl::Duration> seconds = ParseSeconds(text);
  if (seconds.ok()) fuzz::Require(*seconds >= absl::ZeroDuration());
  if (bytes.ok()) fuzz::Require(!text.empty());

  // The environment: each variable set (to fuzzed text, NUL-free) or unset.
  for (const char* name : kVariables) {
    const uint8_t how = in.Take<uint8_t>();
    if (how % 3 == 0) {
      unsetenv(name);
    } else {
      std::string value = in.TakeString(48);
      for (char& c : value) {
        if (c == '\0') c = ' ';
      }
      setenv(name, value.c_str(), 1);
    }
  }
  DaemonConfig config;
  if (ApplyEnvironment(&config).ok()) {
    fuzz::Require(config.spin >= absl::ZeroDuration());
    fuzz::Require(config.peer_timeout >= absl::ZeroDuration());
    fuzz::Require(config.stall_timeout >= absl::ZeroDuration());
    fuzz::Require(config.stall_warning >= absl::ZeroDuration());
  }
  for (const char* name : kVariables) unsetenv(name);

  const uint8_t plane = in.Take<uint8_t>();
  config.peer_address = (plane & 1) ? in.TakeString(64) : std::string(kDefaultPeerAddress);
  if (plane & 2) config.peer_tls_ca = "ca.pem";
  if (plane & 4) config.peer_tls_cert = "cert.pem";
  if (plane & 8) config.peer_tls_key = "key.pem";
  config.peer_plaintext = (plane & 16) != 0;
  absl::StatusOr<PeerPlane> resolved = ResolvePeerPlane(config);
  const bool loopback = IsLoopbackAddress(config.peer_address);
  if (resolved.ok()) {
    if (config.peer_address.empty()) fuzz::Require(*resolved == PeerPlane::kOff);
    if (*resolved == PeerPlane::kOff && !config.peer_address.empty()) fuzz::Require(loopback);
    if (*resolved == PeerPlane::kPlaintext) fuzz::Require(config.peer_plaintext);
  }
  (void)IsLoopbackAddress(in.TakeRest());
}

}  // namespace
}  // namespace kolo::daemon

KOLO_FUZZ_TARGET(kolo::daemon::Run)
