#include "daemon/config.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kolo::daemon {

absl::StatusOr<uint64_t> ParseBytes(const std::string& text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  uint64_t mult = 1;
  std::string lower = absl::AsciiStrToLower(s);
  absl::string_view body = lower;
  struct Suffix {
    const char* text;
    uint64_t mult;
  };
  for (const Suffix& suf : {Suffix{"kib", 1ull << 10}, Suffix{"mib", 1ull << 20},
                            Suffix{"gib", 1ull << 30}, Suffix{"k", 1ull << 10},
                            Suffix{"m", 1ull << 20}, Suffix{"g", 1ull << 30}, Suffix{"b", 1}}) {
    if (absl::EndsWith(body, suf.text)) {
      body.remove_suffix(std::char_traits<char>::length(suf.text));
      mult = suf.mult;
      break;
    }
  }
  uint64_t value = 0;
  if (!absl::SimpleAtoi(body, &value) || value > UINT64_MAX / mult) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not a byte count (e.g. 64M)"));
  }
  return value * mult;
}

absl::StatusOr<absl::Duration> ParseSeconds(const std::string& text) {
  double seconds = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &seconds) || !(seconds >= 0) ||
      seconds > 1e9) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not a number of seconds >= 0"));
  }
  return absl::Seconds(seconds);
}

absl::Status ApplyEnvironment(DaemonConfig* config) {
  for (auto [name, field] : {std::pair{"KOLO_STALL_WARNING_S", &config->stall_warning},
                             std::pair{"KOLO_STALL_TIMEOUT_S", &config->stall_timeout},
                             std::pair{"KOLO_PEER_TIMEOUT_S", &config->peer_timeout},
                             std::pair{"KOLO_TRANSFER_TIMEOUT_S", &config->transfer_timeout},
                             std::pair{"KOLO_NCCL_INIT_TIMEOUT_S", &config->nccl_init_timeout},
                             std::pair{"KOLO_NCCL_TIMEOUT_S", &config->nccl_timeout}}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    auto d = ParseSeconds(v);
    if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", d.status().message()));
    *field = *d;
  }
  if (const char* v = std::getenv("KOLO_SOCKET"); v != nullptr && *v) {
    config->socket_path = v;
  }
  if (const char* v = std::getenv("KOLO_FUSION_THRESHOLD"); v != nullptr && *v) {
    auto bytes = ParseBytes(v);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("KOLO_FUSION_THRESHOLD: ", bytes.status().message()));
    }
    config->fusion_threshold_bytes = *bytes;
  }
  if (const char* v = std::getenv("KOLO_SPIN_US"); v != nullptr && *v) {
    int us = 0;
    if (!absl::SimpleAtoi(v, &us) || us < 0 || us > 100000) {
      return absl::InvalidArgumentError(absl::StrCat("KOLO_SPIN_US=\"", v, "\": want 0..100000"));
    }
    config->spin = absl::Microseconds(us);
  }
  if (const char* v = std::getenv("KOLO_LOG_LEVEL"); v != nullptr && *v) {
    config->log_level = v;
  }
  return absl::OkStatus();
}

bool IsLoopbackAddress(const std::string& host_port) {
  std::string host = host_port.substr(0, host_port.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return absl::StartsWith(host, "127.") || host == "::1" || host == "localhost";
}

absl::StatusOr<PeerPlane> ResolvePeerPlane(const DaemonConfig& config) {
  const bool ca = !config.peer_tls_ca.empty();
  const bool cert = !config.peer_tls_cert.empty();
  const bool key = !config.peer_tls_key.empty();
  if ((ca || cert || key) && !(ca && cert && key)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--peer_tls_ca, --peer_tls_cert and --peer_tls_key go together; missing:",
        ca ? "" : " --peer_tls_ca", cert ? "" : " --peer_tls_cert", key ? "" : " --peer_tls_key"));
  }
  const bool tls = ca && cert && key;
  if (tls && config.peer_plaintext) {
    return absl::InvalidArgumentError(
        "--peer_plaintext contradicts --peer_tls_ca/--peer_tls_cert/--peer_tls_key: give one");
  }
  if (config.peer_address.empty()) return PeerPlane::kOff;
  if (tls) return PeerPlane::kTls;
  if (config.peer_plaintext) return PeerPlane::kPlaintext;
  // Other hosts cannot reach a loopback address: without TLS or an explicit
  // --peer_plaintext the plane is simply off there.
  if (IsLoopbackAddress(config.peer_address)) return PeerPlane::kOff;
  return absl::FailedPreconditionError(absl::StrCat(
      "--peer_address=", config.peer_address,
      " serves multi-node jobs to other hosts, but no TLS is configured: give "
      "--peer_tls_ca, --peer_tls_cert and --peer_tls_key (tools/make_test_ca.sh makes a test "
      "CA), or --peer_plaintext to run the Peer plane unencrypted on a trusted network"));
}

}  // namespace kolo::daemon
