#include "daemon/exec/completions.h"

#include <map>

namespace kolo::daemon {

void Deliver(Outbox& items) {
  if (items.empty()) return;
  if (items.size() == 1) {
    items.front().first->Complete(absl::MakeConstSpan(&items.front().second, 1));
    items.clear();
    return;
  }
  std::map<RequestOrigin*, std::vector<Completion>> by_session;
  for (auto& [s, c] : items) by_session[s].push_back(std::move(c));
  for (auto& [s, cs] : by_session) s->Complete(cs);
  items.clear();
}

void CompleteAll(const std::vector<ReadySet>& sets, const absl::Status& status) {
  Outbox out;
  for (const ReadySet& set : sets) {
    for (const Request& r : set.requests) {
      out.push_back({r.origin.get(), Completion{r.request_id, status}});
    }
  }
  Deliver(out);
}

}  // namespace kolo::daemon
