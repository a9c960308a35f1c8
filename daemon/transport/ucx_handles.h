// Move-only owners of UCX objects: a ucp_context, a ucp_worker, a ucp_ep.
//
// Destruction order matters to UCX (endpoints, then the worker, then the
// context); owners declared in that reverse order in a class get it for free.
//
// Thread-safety: value types with one owner. A UcxWorker is used by one
// thread at a time (Kolo creates it UCS_THREAD_MODE_SINGLE), and so are the
// endpoints on it.
#pragma once

#include <ucp/api/ucp.h>

#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kolo::daemon {

class UcxContext {
 public:
  UcxContext() = default;
  // Reads UCX's configuration from the environment (UCX_TLS and friends)
  // and initialises a context with tag matching and wakeup.
  static absl::StatusOr<UcxContext> Create();
  UcxContext(UcxContext&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  UcxContext& operator=(UcxContext&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  ~UcxContext();
  ucp_context_h get() const { return h_; }

 private:
  ucp_context_h h_ = nullptr;
};

class UcxWorker {
 public:
  UcxWorker() = default;
  static absl::StatusOr<UcxWorker> Create(ucp_context_h context);
  UcxWorker(UcxWorker&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  UcxWorker& operator=(UcxWorker&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  ~UcxWorker();
  ucp_worker_h get() const { return h_; }

 private:
  ucp_worker_h h_ = nullptr;
};

// An endpoint to one remote worker. Close() must run on the thread that owns
// the worker; the destructor force-closes an endpoint that is still open, so
// it too runs where the worker may be progressed.
class UcxEndpoint {
 public:
  UcxEndpoint() = default;
  UcxEndpoint(ucp_worker_h worker, ucp_ep_h ep) : worker_(worker), ep_(ep) {}
  UcxEndpoint(UcxEndpoint&& o) noexcept : worker_(o.worker_), ep_(std::exchange(o.ep_, nullptr)) {}
  UcxEndpoint& operator=(UcxEndpoint&& o) noexcept {
    std::swap(worker_, o.worker_);
    std::swap(ep_, o.ep_);
    return *this;
  }
  ~UcxEndpoint() { Close(/*force=*/true, absl::Now() + absl::Seconds(1)); }

  ucp_ep_h get() const { return ep_; }
  bool open() const { return ep_ != nullptr; }

  // Closes the endpoint: with `force`, at once, failing its outstanding
  // requests with UCS_ERR_CANCELED; otherwise after flushing them. Progresses
  // the worker until the close completes or `deadline` passes (then the
  // worker's destruction finishes the job). Returns whether it completed.
  bool Close(bool force, absl::Time deadline);

 private:
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
};

}  // namespace kolo::daemon
