#include "common/random_id.h"

#include <sys/random.h>

#include <cstdint>
#include <vector>

#include "absl/strings/escaping.h"

namespace kolo {

std::string RandomHex(int bytes) {
  std::vector<uint8_t> buf(bytes);
  size_t got = 0;
  while (got < buf.size()) {
    ssize_t n = getrandom(buf.data() + got, buf.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(buf.data()), buf.size()));
}

}  // namespace kolo
