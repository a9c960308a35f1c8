#include "client/kolod_locator.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/unique_fd.h"

namespace kolo {
namespace {

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

absl::StatusOr<std::string> FindKolod(const KolodLocator& locator) {
  if (!locator.flag_path.empty()) {
    if (IsExecutableFile(locator.flag_path)) return locator.flag_path;
    return absl::NotFoundError(
        absl::StrCat("--kolod ", locator.flag_path, " is not an executable file"));
  }
  if (!locator.env_path.empty()) {
    if (IsExecutableFile(locator.env_path)) return locator.env_path;
    return absl::NotFoundError(
        absl::StrCat("KOLO_KOLOD=", locator.env_path, " is not an executable file"));
  }
  std::vector<std::string> tried;
  if (!locator.self_exe.empty()) {
    const std::filesystem::path dir = std::filesystem::path(locator.self_exe).parent_path();
    for (const std::filesystem::path& candidate :
         {dir / "kolod", (dir / "../../daemon/kolod").lexically_normal()}) {
      if (IsExecutableFile(candidate.string())) return candidate.string();
      tried.push_back(candidate.string());
    }
  }
  for (absl::string_view dir : absl::StrSplit(locator.path_env, ':')) {
    const std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/kolod");
    if (IsExecutableFile(candidate)) return candidate;
  }
  tried.push_back("kolod in PATH");
  return absl::NotFoundError(absl::StrCat("cannot find kolod (tried ", absl::StrJoin(tried, ", "),
                                          "); pass --kolod or set KOLO_KOLOD"));
}

bool SocketAccepts(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) return false;
  path.copy(addr.sun_path, path.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return false;
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
    return true;
  }
  // A full backlog still means that someone listens there.
  return errno == EAGAIN;
}

std::vector<std::string> PrivateKolodArgv(const std::string& kolod, const std::string& socket) {
  return {kolod, "--socket", socket, "--status_address=127.0.0.1:0", "--peer_address="};
}

}  // namespace kolo
