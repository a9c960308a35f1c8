#include "daemon/transport/sealed_lane.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {

// OpenSSL's HMAC keyed once (fetching the algorithm per message costs
// several microseconds); each tag works on a copy of the keyed context.
struct SealedLane::MacState {
  ~MacState() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (keyed != nullptr) EVP_MAC_CTX_free(keyed);
    if (mac != nullptr) EVP_MAC_free(mac);
  }
  EVP_MAC* mac = nullptr;
  absl::Mutex mu;  // copies of `keyed` are taken one at a time
  EVP_MAC_CTX* keyed ABSL_GUARDED_BY(mu) = nullptr;
};

absl::StatusOr<std::string> NewLaneKey() {
  std::string key(kLaneKeyBytes, '\0');
  size_t got = 0;
  while (got < key.size()) {
    ssize_t n = ::getrandom(key.data() + got, key.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("getrandom for a lane key: errno ", errno));
    }
    got += static_cast<size_t>(n);
  }
  return key;
}

absl::StatusOr<std::unique_ptr<SealedLane>> SealedLane::Create(MessageLane* lane, std::string key,
                                                               int self) {
  if (key.size() != kLaneKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a lane key of ", key.size(), " bytes, not ", kLaneKeyBytes));
  }
  auto state = std::make_unique<MacState>();
  state->mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  absl::MutexLock l(&state->mu);
  if (state->mac != nullptr) state->keyed = EVP_MAC_CTX_new(state->mac);
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  if (state->keyed == nullptr ||
      EVP_MAC_init(state->keyed, reinterpret_cast<const unsigned char*>(key.data()), key.size(),
                   params) != 1) {
    return absl::InternalError("OpenSSL has no HMAC-SHA256 for the lane's seals");
  }
  OPENSSL_cleanse(key.data(), key.size());
  return std::unique_ptr<SealedLane>(new SealedLane(lane, std::move(state), self));
}

SealedLane::SealedLane(MessageLane* lane, std::unique_ptr<MacState> mac, int self)
    : lane_(lane), mac_(std::move(mac)), self_(self) {}

SealedLane::~SealedLane() = default;

std::string SealedLane::Tag(int from, int to, absl::string_view message) {
  unsigned char header[8];
  for (int i = 0; i < 4; ++i) {
    header[i] = static_cast<unsigned char>(static_cast<uint32_t>(from) >> (8 * i));
    header[4 + i] = static_cast<unsigned char>(static_cast<uint32_t>(to) >> (8 * i));
  }
  EVP_MAC_CTX* ctx;
  {
    absl::MutexLock l(&mac_->mu);
    ctx = EVP_MAC_CTX_dup(mac_->keyed);
  }
  if (ctx == nullptr) return std::string();
  unsigned char out[EVP_MAX_MD_SIZE];
  size_t length = 0;
  const bool ok = EVP_MAC_update(ctx, header, sizeof(header)) == 1 &&
                  EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(message.data()),
                                 message.size()) == 1 &&
                  EVP_MAC_final(ctx, out, &length, sizeof(out)) == 1 && length == kTagBytes;
  EVP_MAC_CTX_free(ctx);
  if (!ok) return std::string();
  return std::string(reinterpret_cast<const char*>(out), length);
}

std::string SealedLane::Seal(int from, int to, absl::string_view message) {
  return absl::StrCat(message, Tag(from, to, message));
}

absl::StatusOr<absl::string_view> SealedLane::Open(int from, int to, absl::string_view sealed) {
  if (sealed.size() < kTagBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a message of ", sealed.size(), " bytes, shorter than its seal"));
  }
  absl::string_view message = sealed.substr(0, sealed.size() - kTagBytes);
  const std::string expected = Tag(from, to, message);
  if (expected.size() != kTagBytes ||
      CRYPTO_memcmp(expected.data(), sealed.data() + message.size(), kTagBytes) != 0) {
    return absl::PermissionDeniedError(
        "its seal does not verify under the job's lane key (not from a daemon of this job, or "
        "changed on the way)");
  }
  return message;
}

void SealedLane::SetMessageHandler(Handler handler) {
  lane_->SetMessageHandler(
      [this, handler = std::move(handler)](int peer, absl::string_view sealed) {
        absl::StatusOr<absl::string_view> message = Open(peer, self_, sealed);
        if (!message.ok()) {
          const uint64_t n = dropped_.fetch_add(1, std::memory_order_relaxed) + 1;
          if ((n & (n - 1)) == 0) {
            spdlog::warn(
                "node {}: dropped a message of {} bytes said to be from node {} ({} so far): {}",
                self_, sealed.size(), peer, n, std::string(message.status().message()));
          }
          return;
        }
        handler(peer, *message);
      });
}

absl::Status SealedLane::SendMessage(int peer, std::shared_ptr<const std::string> message) {
  if (message == nullptr || message->size() > max_message_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("a sealed message of ",
                                                   message == nullptr ? 0 : message->size(),
                                                   " bytes (at most ", max_message_bytes(), ")"));
  }
  std::string tag = Tag(self_, peer, *message);
  if (tag.empty()) return absl::InternalError("OpenSSL could not seal a lane message");
  return lane_->SendMessage(peer, std::make_shared<std::string>(absl::StrCat(*message, tag)));
}

size_t SealedLane::max_message_bytes() const {
  const size_t below = lane_->max_message_bytes();
  return below > kTagBytes ? below - kTagBytes : 0;
}

}  // namespace kolo::daemon
