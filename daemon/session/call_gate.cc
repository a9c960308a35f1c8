#include "daemon/session/call_gate.h"

#include <grpc/grpc.h>
#include <sys/socket.h>

#include <grpcpp/alarm.h>
#include <grpcpp/server_context.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {

using grpc::experimental::InterceptionHookPoints;

struct CallGate::State {
  explicit State(CallGateOptions o)
      : options(std::move(o)),
        calls(absl::StrCat("calls on ", options.where), options.calls_knob, options.calls),
        anonymous(absl::StrCat("calls without credentials on ", options.where),
                  options.anonymous_knob, options.anonymous_calls) {}
  const CallGateOptions options;
  Shares calls;
  Shares anonymous;
};

namespace {

constexpr char kAdminIdentity[] = "the admin token";

// One call's hold on its shares, and its deadline when it shows nothing.
class GateInterceptor final : public grpc::experimental::Interceptor {
 public:
  GateInterceptor(std::shared_ptr<CallGate::State> state, grpc::experimental::ServerRpcInfo* info)
      : state_(std::move(state)), info_(info) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (!seen_ &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      seen_ = true;
      Admit(methods->GetRecvInitialMetadata());
    }
    methods->Proceed();
  }

 private:
  void Admit(const std::multimap<grpc::string_ref, grpc::string_ref>* metadata) {
    grpc::ServerContextBase* context = info_->server_context();
    grpc_call* call = context->c_call();
    if (call == nullptr) return;  // cannot happen: the call is bound first
    const CallGateOptions& options = state_->options;
    CallStart start;
    start.method = info_->method();
    start.unary = info_->type() == grpc::experimental::ServerRpcInfo::Type::UNARY;
    start.metadata = metadata;
    std::string identity = CallerOf(context->peer(), &start.peer_uid);
    const Presented presented = options.presented ? options.presented(start) : Presented::kNothing;
    if (presented == Presented::kAdminToken && options.identity == CallerIdentity::kSourceAddress) {
      identity = kAdminIdentity;
    }
    absl::StatusOr<Shares::Lease> lease = state_->calls.Take(identity);
    if (!lease.ok()) return Refuse(call, lease.status());
    call_lease_ = *std::move(lease);
    if (presented != Presented::kNothing) return;
    absl::StatusOr<Shares::Lease> anonymous = state_->anonymous.Take(identity);
    if (!anonymous.ok()) return Refuse(call, anonymous.status());
    anonymous_lease_ = *std::move(anonymous);
    // The alarm's callback holds a reference to the call: it may run after
    // the call (and this interceptor) ended, then with ok false or on a
    // finished call, where cancelling does nothing.
    grpc_call_ref(call);
    const absl::Duration deadline = options.anonymous_deadline;
    std::string message = absl::StrCat(info_->method(), " on ", options.where,
                                       " presented no credentials (a handoff ticket "
                                       "or the admin token) and is closed after ",
                                       absl::FormatDuration(deadline));
    alarm_.emplace();
    alarm_->Set(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(deadline),
                [call, message = std::move(message)](bool fired) {
                  if (fired) {
                    grpc_call_cancel_with_status(call, GRPC_STATUS_DEADLINE_EXCEEDED,
                                                 message.c_str(), nullptr);
                  }
                  grpc_call_unref(call);
                });
  }

  void Refuse(grpc_call* call, const absl::Status& status) {
    spdlog::debug("{}: {}", info_->method(), std::string(status.message()));
    const std::string message(status.message());
    grpc_call_cancel_with_status(call, GRPC_STATUS_RESOURCE_EXHAUSTED, message.c_str(), nullptr);
  }

  const std::shared_ptr<CallGate::State> state_;
  grpc::experimental::ServerRpcInfo* const info_;
  bool seen_ = false;
  Shares::Lease call_lease_;
  Shares::Lease anonymous_lease_;
  // Destroyed first: a pending alarm is cancelled.
  std::optional<grpc::Alarm> alarm_;
};

class GateFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit GateFactory(std::shared_ptr<CallGate::State> state) : state_(std::move(state)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new GateInterceptor(state_, info);  // gRPC owns its interceptors
  }

 private:
  const std::shared_ptr<CallGate::State> state_;
};

}  // namespace

std::string CallerOf(absl::string_view peer, std::optional<uid_t>* uid) {
  int fd = -1;
  if (absl::ConsumePrefix(&peer, "fd:") && absl::SimpleAtoi(peer, &fd) && fd >= 0) {
    // The call holds its connection, so `fd` is still that connection's.
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred)) {
      return "an unknown peer";
    }
    *uid = cred.uid;
    return absl::StrCat("uid ", cred.uid);
  }
  const size_t colon = peer.rfind(':');
  if (colon != absl::string_view::npos && colon + 1 < peer.size() &&
      std::all_of(peer.begin() + colon + 1, peer.end(), absl::ascii_isdigit)) {
    return std::string(peer.substr(0, colon));
  }
  return std::string(peer);
}

CallGate::CallGate(CallGateOptions options) : state_(std::make_shared<State>(std::move(options))) {}

CallGate::~CallGate() = default;

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> CallGate::Factory() const {
  return std::make_unique<GateFactory>(state_);
}

int CallGate::calls_held(absl::string_view identity) const { return state_->calls.held(identity); }

int CallGate::anonymous_calls_held(absl::string_view identity) const {
  return state_->anonymous.held(identity);
}

}  // namespace kolo::daemon
