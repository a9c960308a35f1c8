// What a call shows of who is calling, as CallGate asks before the call's
// handler runs (see daemon/session/call_gate.h). A call presents
// credentials when it carries
//   - the admin token ("authorization: Bearer <token>"), on either server;
//   - on the Unix socket, a handoff ticket (identity or session,
//     "kolo-handoff") that the table still holds, of the connection's uid;
//   - on the Unix socket, a unary call of the Node service: it names a
//     session by its id, which its handler checks before any work.
// Anything else presents nothing, and CallGate closes it after a deadline.
//
// Thread-safety: thread-safe (the table locks itself; the rules are const).
#pragma once

#include <string>

#include "absl/time/time.h"
#include "daemon/session/call_gate.h"
#include "daemon/session/handoff_table.h"

namespace kolo::daemon {

struct CallCredentialRules {
  std::string admin_token;
  // Where handoff tickets are accepted (the Unix socket); null elsewhere.
  HandoffTable* tickets = nullptr;
  // Whether Node's unary calls count as a session's (the Unix socket).
  bool session_calls = false;
};

Presented JudgeCall(const CallStart& call, const CallCredentialRules& rules, absl::Time now);

}  // namespace kolo::daemon
