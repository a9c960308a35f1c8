// Fuzzes the daemon's side of the identity handoff: AnswerHandoff with
// request bytes, callers and descriptors from the input (none, or a memfd
// of fuzzed size, contents, seals and access mode), interleaved with
// Redeem and Identify of fuzzed or issued tickets as time moves on. Every
// reply must parse with the client's ParseHandoffReply, an issued ticket
// must redeem once while fresh, and no descriptor may outlive the table.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/handoff.h"
#include "common/unique_fd.h"
#include "daemon/session/handoff_server.h"
#include "daemon/session/handoff_table.h"
#include "tools/fuzz/fuzz_input.h"

namespace kolo::daemon {
namespace {

int OpenDescriptors() {
  int n = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n;
}

// A memfd as a client might send it: the input picks size (up to 64 KiB),
// contents, which seals it carries and whether it is read-only.
UniqueFd SegmentFrom(fuzz::FuzzInput& in) {
  UniqueFd fd(memfd_create("kolo-fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return fd;
  const uint16_t bytes = in.Take<uint16_t>();
  const uint8_t how = in.Take<uint8_t>();
  if (ftruncate(fd.get(), bytes) != 0) return UniqueFd();
  std::string contents = in.TakeString();
  if (!contents.empty()) (void)!pwrite(fd.get(), contents.data(), contents.size(), 0);
  int seals = 0;
  if (how & 1) seals |= F_SEAL_SHRINK;
  if (how & 2) seals |= F_SEAL_GROW;
  if (how & 4) seals |= F_SEAL_SEAL;
  if (how & 8) seals |= F_SEAL_WRITE;
  if (seals != 0) (void)fcntl(fd.get(), F_ADD_SEALS, seals);
  if (how & 16) {
    // Read-only, as a client that reopened its memfd would send it.
    std::string path = "/proc/self/fd/" + std::to_string(fd.get());
    return UniqueFd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  }
  return fd;
}

void Run(fuzz::FuzzInput& in) {
  const int descriptors_before = OpenDescriptors();
  {
    HandoffLimits limits;
    limits.max_waiting = 1 + in.Take<uint8_t>() % 8;
    limits.max_waiting_per_uid = 1 + in.Take<uint8_t>() % 8;
    HandoffTable table(limits);
    absl::Time now = absl::FromUnixSeconds(1'000'000);
    std::vector<std::string> tickets;
    for (int step = 0; step < 32 && !in.empty(); ++step) {
      const uint8_t op = in.Take<uint8_t>();
      now += absl::Seconds(in.Take<uint8_t>() % 16);
      ProcessCredentials caller;
      caller.pid = 100 + op;
      caller.uid = (op & 0x10) ? getuid() + 1 : getuid();
      caller.gid = getgid();
      switch (op % 4) {
        case 0: {  // a request, with or without a segment
          std::string request = (op & 0x20) ? in.TakeString() : std::string(kHandoffRequest);
          UniqueFd segment = (op & 0x40) ? SegmentFrom(in) : UniqueFd();
          std::string reply = AnswerHandoff(caller, request, std::move(segment), &table, now);
          fuzz::Require(reply.size() <= kMaxHandoffMessageBytes);
          absl::StatusOr<std::string> parsed = ParseHandoffReply(reply);
          // An error reply carries its status; only a malformed one fails to.
          fuzz::Require(parsed.ok() ||
                        parsed.status().message().find("malformed") == std::string::npos);
          if (parsed.ok()) {
            fuzz::Require(parsed->size() == kHandoffTicketChars);
            tickets.push_back(*parsed);
          }
          break;
        }
        case 1: {  // redeem an issued ticket while it is fresh: once only
          if (tickets.empty()) break;
          std::string ticket = tickets[in.Take<uint8_t>() % tickets.size()];
          (void)table.Redeem(ticket, now);
          fuzz::Require(!table.Redeem(ticket, now).ok());
          break;
        }
        case 2:  // a forged ticket
          fuzz::Require(!table.Redeem(in.TakeString(), now).ok() || !tickets.empty());
          break;
        case 3:
          (void)table.Identify(tickets.empty() ? in.TakeString() : tickets.back(), now);
          break;
      }
      fuzz::Require(table.waiting() <= limits.max_waiting);
    }
  }
  fuzz::Require(OpenDescriptors() == descriptors_before);
}

}  // namespace
}  // namespace kolo::daemon

KOLO_FUZZ_TARGET(kolo::daemon::Run)
