// PeerCredentials: how this daemon's Peer plane (the gRPC links between the
// daemons of multi-node jobs) is secured, read once at start.
//
// Mutual TLS: every daemon holds a certificate signed by one cluster CA
// (tools/make_test_ca.sh makes a test one). The Peer server requires and
// verifies a client certificate against that CA, so only daemons of the
// cluster can open a stream at all; the job token then decides which job a
// stream may join. A member daemon verifies the coordinator's certificate
// against the same CA and checks that it names the host the member dialed
// (the host part of the coordinator's peer address: a DNS name, or an IP
// address matched against the certificate's IP subject alternative names),
// which is gRPC's standard check. No target-name override is used: a
// certificate issued for one host cannot impersonate another, so each
// daemon's certificate must list the address other daemons reach it on.
//
// Plaintext (--peer_plaintext) is an explicit opt-out for trusted networks
// and tests.
//
// Thread-safety: immutable after construction; safe to share.
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kolo::daemon {

// Paths of the PEM files that secure the Peer plane.
struct PeerTlsFiles {
  std::string ca;    // the CA that signs every daemon's certificate
  std::string cert;  // this daemon's certificate (chain), for both ends of its links
  std::string key;   // its private key
};

class PeerCredentials {
 public:
  // Reads the three files; an unreadable or empty file is an error naming it.
  static absl::StatusOr<PeerCredentials> Tls(const PeerTlsFiles& files);
  static PeerCredentials Plaintext() { return PeerCredentials(); }

  bool tls() const { return tls_; }
  // For the Peer server: with TLS, a client certificate is required and
  // verified against the CA.
  std::shared_ptr<grpc::ServerCredentials> Server() const;
  // For this daemon's links to coordinators: the CA to verify them with and
  // this daemon's certificate to present.
  std::shared_ptr<grpc::ChannelCredentials> Channel() const;

 private:
  PeerCredentials() = default;
  bool tls_ = false;
  std::string ca_pem_;
  std::string cert_pem_;
  std::string key_pem_;
};

}  // namespace kolo::daemon
