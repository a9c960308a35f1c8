// Finding and starting a private kolod: shared by kolorun (a private kolod
// for a job on one machine) and libkolo (a private kolod for a torchrun job
// on one node that finds no kolod on its socket).
//
// Thread-safety: free functions.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kolo {

// Where to look for kolod when a private one is needed, in this order:
// `flag_path`, `env_path`, "kolod" beside `self_exe`, "../../daemon/kolod"
// from `self_exe`'s directory (the bazel-bin layout), then each directory of
// `path_env`. An explicit flag or env path must be executable: it is never
// silently replaced by a later candidate.
struct KolodLocator {
  std::string flag_path;  // kolorun --kolod
  std::string env_path;   // KOLO_KOLOD
  std::string self_exe;   // the launcher's own executable (/proc/self/exe)
  std::string path_env;   // PATH
};
absl::StatusOr<std::string> FindKolod(const KolodLocator& locator);

// True when something accepts connections on the Unix socket `path`.
bool SocketAccepts(const std::string& path);

// The argv of a private kolod `kolod` on `socket`: its status port is the
// kernel's choice (never the node's default), and it serves no Peer plane,
// since its job stays on this machine.
std::vector<std::string> PrivateKolodArgv(const std::string& kolod, const std::string& socket);

}  // namespace kolo
