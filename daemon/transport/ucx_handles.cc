#include "daemon/transport/ucx_handles.h"

#include "absl/time/clock.h"
#include "daemon/transport/ucx_status.h"

namespace kolo::daemon {

absl::StatusOr<UcxContext> UcxContext::Create() {
  ucp_config_t* config = nullptr;
  absl::Status s =
      UcsToStatus(ucp_config_read(nullptr, nullptr, &config), "read UCX configuration");
  if (!s.ok()) return s;
  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  UcxContext c;
  s = UcsToStatus(ucp_init(&params, config, &c.h_), "create UCX context");
  ucp_config_release(config);
  if (!s.ok()) return s;
  return c;
}

UcxContext::~UcxContext() {
  if (h_ != nullptr) ucp_cleanup(h_);
}

absl::StatusOr<UcxWorker> UcxWorker::Create(ucp_context_h context) {
  ucp_worker_params_t params = {};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  UcxWorker w;
  absl::Status s = UcsToStatus(ucp_worker_create(context, &params, &w.h_), "create UCX worker");
  if (!s.ok()) return s;
  return w;
}

UcxWorker::~UcxWorker() {
  if (h_ != nullptr) ucp_worker_destroy(h_);
}

bool UcxEndpoint::Close(bool force, absl::Time deadline) {
  if (ep_ == nullptr) return true;
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t req = ucp_ep_close_nbx(std::exchange(ep_, nullptr), &param);
  if (req == nullptr || UCS_PTR_IS_ERR(req)) return true;
  // Bounded by `deadline`; each pass either progresses or checks the clock.
  bool done = false;
  for (;;) {
    ucp_worker_progress(worker_);
    if (ucp_request_check_status(req) != UCS_INPROGRESS) {
      done = true;
      break;
    }
    if (absl::Now() >= deadline) break;
  }
  // Freeing an unfinished close request lets UCX finish or drop it with the
  // worker.
  ucp_request_free(req);
  return done;
}

}  // namespace kolo::daemon
