#include "common/short_temp_dir.h"

#include <stdlib.h>

#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace kolo {
namespace {

// The directories this program made; removed at exit, after the tests'
// daemons and clients (owned by the tests) are gone.
// Thread-safety: guarded by mu.
struct MadeDirs {
  absl::Mutex mu;
  std::vector<std::string> dirs ABSL_GUARDED_BY(mu);
  ~MadeDirs() {
    absl::MutexLock l(&mu);
    for (const std::string& d : dirs) {
      std::error_code ignored;
      std::filesystem::remove_all(d, ignored);
    }
  }
};

}  // namespace

std::string MakeShortTempDir(absl::string_view prefix) {
  static MadeDirs made;
  std::string tmpl = absl::StrCat("/tmp/", prefix, "-XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) return std::string();
  absl::MutexLock l(&made.mu);
  made.dirs.push_back(tmpl);
  return tmpl;
}

}  // namespace kolo
