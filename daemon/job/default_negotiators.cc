#include "daemon/job/default_negotiators.h"

#include <utility>
#include <vector>

#include "daemon/backend/host_multinode/host_multinode_backend.h"
#include "daemon/negotiation/local_negotiator.h"
#include "daemon/negotiation/peer_negotiator.h"

namespace kolo::daemon {
namespace {

std::unique_ptr<Negotiator> MakeNegotiator(const NegotiatorParams& params, StepRunner* runner) {
  const JobLayout& layout = params.layout;
  if (SpansNodes(params.size, layout)) {
    PeerNegotiatorOptions options;
    options.job_id = layout.negotiation_id.empty() ? params.job_id : layout.negotiation_id;
    options.job_token = params.job_token;
    options.size = params.size;
    options.node_name = layout.env.node_name;
    options.coordinators = layout.env.coordinators;
    options.coordinator_address = layout.coordinator;
    options.peer_credentials = layout.env.peer_credentials;
    options.peer_timeout = layout.env.peer_timeout;
    options.transports = layout.env.transports;
    options.asked_settings = layout.asked_settings;
    options.settings = layout.settings;
    options.fusion_threshold_cap = layout.fusion_threshold_cap;
    options.make_host_backend = [](Transport* transport, std::vector<int> node_of) {
      return std::unique_ptr<Backend>(
          std::make_unique<HostMultinodeBackend>(transport, std::move(node_of)));
    };
    return std::make_unique<PeerNegotiator>(std::move(options), runner);
  }
  LocalNegotiatorOptions options;
  options.job_id = params.job_id;
  options.size = params.size;
  options.fusion_threshold_bytes = params.fusion_threshold_bytes;
  options.autotune = layout.settings.autotune;
  options.fusion_threshold_bound = layout.fusion_threshold_cap;
  options.host_backend = params.host_backend;
  if (DeviceBackendFactory* devices = params.device_backends; devices != nullptr) {
    options.new_device_comm_id = [devices] { return devices->NewCommId(); };
  }
  return std::make_unique<LocalNegotiator>(std::move(options), runner);
}

}  // namespace

NegotiatorFactory DefaultNegotiators() { return MakeNegotiator; }

}  // namespace kolo::daemon
