// CallGate: what one gRPC server lets each caller hold. Every call is counted
// against its caller's share before its handler runs (shares before totals),
// and a call that presents no credentials is closed after a short deadline,
// whatever service it opened, so that an idle stream (server reflection,
// health Watch) cannot hold one of the server's threads for long.
//
// The gate is a server interceptor: it sees a call once its initial metadata
// has arrived, before the handler. A call over a share is ended there with
// RESOURCE_EXHAUSTED and a message naming the share (the handler then runs
// on a cancelled call and returns at once); a call without credentials is
// ended with DEADLINE_EXCEEDED when its deadline passes. Both use gRPC
// core's cancel-with-status, which sends that status to the client.
//
// Who the caller is:
//   - on the Unix socket (connections accepted by UnixListener and handed to
//     the server as "fd:N"), the uid the kernel gives for the connection;
//   - on TCP, the source address, or "the admin token" for a call that
//     carries it (so a busy address cannot starve the operator).
//
// Thread-safety: thread-safe; the interceptors share the gate's state, which
// lives as long as the last of them.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/string_ref.h>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/session/shares.h"

namespace kolo::daemon {

// What a call shows of who is calling, judged before its handler runs.
enum class Presented {
  kNothing,     // no credentials: the deadline and the anonymous share apply
  kTicket,      // a handoff ticket the table knows, of the connection's uid
  kAdminToken,  // the admin token
  kSessionCall  // a Node call that names a session (its handler checks it)
};

// A call as the gate sees it when it arrives.
struct CallStart {
  absl::string_view method;  // "/kolo.v1.Node/Attach"
  bool unary = false;
  const std::multimap<grpc::string_ref, grpc::string_ref>* metadata = nullptr;
  std::optional<uid_t> peer_uid;  // on the Unix socket
};

enum class CallerIdentity {
  kUnixPeerUid,    // "uid N", from SO_PEERCRED of the call's connection
  kSourceAddress,  // "ipv4:127.0.0.1", or "the admin token"
};

struct CallGateOptions {
  std::string where;  // "the Unix socket", "the status port"
  CallerIdentity identity = CallerIdentity::kUnixPeerUid;
  // Every call.
  ShareLimits calls;
  std::string calls_knob;
  // Calls that present nothing (Presented::kNothing), besides `calls`.
  ShareLimits anonymous_calls;
  std::string anonymous_knob;
  absl::Duration anonymous_deadline = absl::Seconds(5);
  // Judges a call's credentials; null treats every call as kNothing.
  std::function<Presented(const CallStart&)> presented;
};

class CallGate {
 public:
  explicit CallGate(CallGateOptions options);
  ~CallGate();
  CallGate(const CallGate&) = delete;
  CallGate& operator=(const CallGate&) = delete;

  // The interceptor factory for ServerBuilder::experimental()
  // .SetInterceptorCreators; it may outlive the gate.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> Factory() const;

  // What `identity` holds now (for tests and status).
  int calls_held(absl::string_view identity) const;
  int anonymous_calls_held(absl::string_view identity) const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// "uid N" for the peer of a connection that kolod accepted itself ("fd:N");
// otherwise the peer without its port ("ipv4:127.0.0.1:5000" ->
// "ipv4:127.0.0.1"). Sets `*uid` when it is a uid.
std::string CallerOf(absl::string_view peer, std::optional<uid_t>* uid);

}  // namespace kolo::daemon
