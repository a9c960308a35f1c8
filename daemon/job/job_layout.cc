#include "daemon/job/job_layout.h"

namespace kolo::daemon {

bool SpansNodes(int size, const JobLayout& layout) {
  return layout.local_size > 0 && (layout.local_size < size || !layout.coordinator.empty());
}

}  // namespace kolo::daemon
