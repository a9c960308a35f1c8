#include "daemon/wire/peer_tls.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace kolo::daemon {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(absl::StrCat(flag, ": cannot read ", path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string pem = ss.str();
  if (pem.find("-----BEGIN ") == std::string::npos) {
    return absl::FailedPreconditionError(absl::StrCat(flag, ": ", path, " holds no PEM block"));
  }
  return pem;
}

}  // namespace

absl::StatusOr<PeerCredentials> PeerCredentials::Tls(const PeerTlsFiles& files) {
  PeerCredentials c;
  c.tls_ = true;
  absl::StatusOr<std::string> ca = ReadPem(files.ca, "--peer_tls_ca");
  if (!ca.ok()) return ca.status();
  absl::StatusOr<std::string> cert = ReadPem(files.cert, "--peer_tls_cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(files.key, "--peer_tls_key");
  if (!key.ok()) return key.status();
  c.ca_pem_ = *std::move(ca);
  c.cert_pem_ = *std::move(cert);
  c.key_pem_ = *std::move(key);
  return c;
}

std::shared_ptr<grpc::ServerCredentials> PeerCredentials::Server() const {
  if (!tls_) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = ca_pem_;
  options.pem_key_cert_pairs.push_back({key_pem_, cert_pem_});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> PeerCredentials::Channel() const {
  if (!tls_) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ca_pem_;
  options.pem_private_key = key_pem_;
  options.pem_cert_chain = cert_pem_;
  return grpc::SslCredentials(options);
}

}  // namespace kolo::daemon
