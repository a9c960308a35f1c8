#include "daemon/config.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

TEST(ParseBytesTest, AcceptsPlainCountsAndBinarySuffixes) {
  struct Case {
    const char* text;
    uint64_t want;
  };
  const Case kCases[] = {
      {"4096", 4096},
      {"0", 0},
      {"64M", uint64_t{64} << 20},
      {"64MiB", uint64_t{64} << 20},
      {"64mib", uint64_t{64} << 20},
      {"1g", uint64_t{1} << 30},
      {"2GiB", uint64_t{2} << 30},
      {"8k", 8192},
      {" 8k ", 8192},
      {"3KiB", 3072},
      {"512b", 512},
      {"18446744073709551615", UINT64_MAX},
      {"16777215G", uint64_t{16777215} << 30},
  };
  for (const Case& c : kCases) {
    absl::StatusOr<uint64_t> got = ParseBytes(c.text);
    ASSERT_TRUE(got.ok()) << "\"" << c.text << "\": " << got.status();
    EXPECT_EQ(*got, c.want) << "\"" << c.text << "\"";
  }
}

TEST(ParseBytesTest, RejectsTextThatIsNotAByteCount) {
  for (const char* text :
       {"", " ", "abc", "-1", "-1M", "12Q", "M", "MiB", "1.5G", "64 MB", "0x100", "1e6", "64MM"}) {
    absl::StatusOr<uint64_t> got = ParseBytes(text);
    EXPECT_FALSE(got.ok()) << "accepted \"" << text << "\" as " << *got;
    if (!got.ok()) {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(std::string(got.status().message()).find(text), std::string::npos) << got.status();
    }
  }
}

TEST(ParseBytesTest, RejectsCountsThatOverflow64Bits) {
  for (const char* text : {"18446744073709551616", "99999999999999999999999", "17179869184G",
                           "17179869184GiB", "17592186044416M", "18014398509481984k"}) {
    absl::StatusOr<uint64_t> got = ParseBytes(text);
    EXPECT_FALSE(got.ok()) << "accepted \"" << text << "\" as " << *got;
  }
}

// Clears the KOLO_* variables around each test so neither the test runner's
// environment nor another test leaks in.
class ApplyEnvironmentTest : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {"KOLO_FUSION_THRESHOLD", "KOLO_SPIN_US", "KOLO_SOCKET",
                                          "KOLO_LOG_LEVEL"};
  void SetUp() override {
    for (const char* v : kVars) unsetenv(v);
  }
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
  }

  // Expects ApplyEnvironment to refuse `var`=`value`, naming the variable,
  // and to leave the config as it was.
  void ExpectRejected(const char* var, const char* value) {
    ASSERT_EQ(setenv(var, value, 1), 0);
    DaemonConfig config;
    absl::Status s = ApplyEnvironment(&config);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << var << "=\"" << value << "\": " << s;
    EXPECT_NE(std::string(s.message()).find(var), std::string::npos) << s;
    DaemonConfig defaults;
    EXPECT_EQ(config.fusion_threshold_bytes, defaults.fusion_threshold_bytes);
    EXPECT_EQ(config.spin, defaults.spin);
    unsetenv(var);
  }
};

TEST_F(ApplyEnvironmentTest, NoVariablesLeavesDefaults) {
  DaemonConfig config;
  ASSERT_TRUE(ApplyEnvironment(&config).ok());
  DaemonConfig defaults;
  EXPECT_EQ(config.socket_path, defaults.socket_path);
  EXPECT_EQ(config.fusion_threshold_bytes, defaults.fusion_threshold_bytes);
  EXPECT_EQ(config.spin, defaults.spin);
  EXPECT_EQ(config.log_level, defaults.log_level);
}

TEST_F(ApplyEnvironmentTest, ReadsEveryVariable) {
  setenv("KOLO_FUSION_THRESHOLD", "32MiB", 1);
  setenv("KOLO_SPIN_US", "250", 1);
  setenv("KOLO_SOCKET", "/tmp/kolo-test/kolod.sock", 1);
  setenv("KOLO_LOG_LEVEL", "debug", 1);
  DaemonConfig config;
  absl::Status s = ApplyEnvironment(&config);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(config.fusion_threshold_bytes, uint64_t{32} << 20);
  EXPECT_EQ(config.spin, absl::Microseconds(250));
  EXPECT_EQ(config.socket_path, "/tmp/kolo-test/kolod.sock");
  EXPECT_EQ(config.log_level, "debug");
}

TEST_F(ApplyEnvironmentTest, SpinBoundsAreInclusive) {
  setenv("KOLO_SPIN_US", "0", 1);
  DaemonConfig config;
  ASSERT_TRUE(ApplyEnvironment(&config).ok());
  EXPECT_EQ(config.spin, absl::ZeroDuration());
  setenv("KOLO_SPIN_US", "100000", 1);
  ASSERT_TRUE(ApplyEnvironment(&config).ok());
  EXPECT_EQ(config.spin, absl::Microseconds(100000));
}

TEST_F(ApplyEnvironmentTest, EmptyValuesCountAsUnset) {
  for (const char* v : kVars) setenv(v, "", 1);
  DaemonConfig config;
  ASSERT_TRUE(ApplyEnvironment(&config).ok());
  DaemonConfig defaults;
  EXPECT_EQ(config.socket_path, defaults.socket_path);
  EXPECT_EQ(config.fusion_threshold_bytes, defaults.fusion_threshold_bytes);
  EXPECT_EQ(config.spin, defaults.spin);
  EXPECT_EQ(config.log_level, defaults.log_level);
}

TEST_F(ApplyEnvironmentTest, RejectsBadFusionThresholdNamingTheVariable) {
  ExpectRejected("KOLO_FUSION_THRESHOLD", "lots");
  ExpectRejected("KOLO_FUSION_THRESHOLD", "-64M");
  ExpectRejected("KOLO_FUSION_THRESHOLD", "12Q");
  ExpectRejected("KOLO_FUSION_THRESHOLD", "99999999999999999999G");
}

TEST_F(ApplyEnvironmentTest, RejectsBadSpinNamingTheVariable) {
  ExpectRejected("KOLO_SPIN_US", "fast");
  ExpectRejected("KOLO_SPIN_US", "-1");
  ExpectRejected("KOLO_SPIN_US", "100001");
  ExpectRejected("KOLO_SPIN_US", "99999999999");
  ExpectRejected("KOLO_SPIN_US", "50us");
}

TEST_F(ApplyEnvironmentTest, BadValueMessageIncludesTheValue) {
  setenv("KOLO_FUSION_THRESHOLD", "lots", 1);
  DaemonConfig config;
  absl::Status s = ApplyEnvironment(&config);
  EXPECT_NE(std::string(s.message()).find("\"lots\""), std::string::npos) << s;
}

TEST(ResolvePeerPlaneTest, TheRuleOfTheFlags) {
  DaemonConfig c;  // the default peer address, no TLS: off
  EXPECT_EQ(*ResolvePeerPlane(c), PeerPlane::kOff);
  c.peer_plaintext = true;
  EXPECT_EQ(*ResolvePeerPlane(c), PeerPlane::kPlaintext);
  c.peer_plaintext = false;
  for (const char* loopback : {"127.0.0.1:0", "127.3.2.1:7371", "[::1]:7371", "localhost:1"}) {
    c.peer_address = loopback;  // unreachable from other hosts: off
    EXPECT_EQ(*ResolvePeerPlane(c), PeerPlane::kOff) << loopback;
  }
  c.peer_address = "10.0.0.7:7371";  // reachable, without TLS: refused, saying how
  absl::StatusOr<PeerPlane> refused = ResolvePeerPlane(c);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--peer_plaintext"), std::string::npos);
  EXPECT_NE(refused.status().message().find("--peer_tls_ca"), std::string::npos);
  c.peer_tls_cert = "node.pem";  // partial TLS flags: refused, naming what is missing
  absl::StatusOr<PeerPlane> partial = ResolvePeerPlane(c);
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.status().message().find("missing: --peer_tls_ca --peer_tls_key"),
            std::string::npos)
      << partial.status();
  c.peer_tls_ca = "ca.pem";
  c.peer_tls_key = "node.key";
  EXPECT_EQ(*ResolvePeerPlane(c), PeerPlane::kTls);
  c.peer_plaintext = true;  // both: refused
  EXPECT_FALSE(ResolvePeerPlane(c).ok());
  c.peer_plaintext = false;
  c.peer_address = "";  // empty: off whatever else is set
  EXPECT_EQ(*ResolvePeerPlane(c), PeerPlane::kOff);
}

}  // namespace
}  // namespace kolo::daemon
