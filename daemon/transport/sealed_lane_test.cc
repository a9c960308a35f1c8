// SealedLane: a message verifies only under the job's key, from the node it
// names, to the node it reached, unchanged; what does not verify is dropped.
#include "daemon/transport/sealed_lane.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

// Two nodes' lanes joined in memory: node i's sends call node 1-i's handler.
class Wire final : public MessageLane {
 public:
  void SetMessageHandler(Handler handler) override { handler_ = std::move(handler); }
  absl::Status SendMessage(int peer, std::shared_ptr<const std::string> message) override {
    sent.push_back(*message);
    if (other == nullptr || !other->handler_) return absl::UnavailableError("no peer");
    other->handler_(self, *message);
    return absl::OkStatus();
  }
  size_t max_message_bytes() const override { return 1024; }
  // Delivers raw bytes to this node as if `from` sent them.
  void Inject(int from, const std::string& bytes) { handler_(from, bytes); }

  int self = 0;
  Wire* other = nullptr;
  std::vector<std::string> sent;

 private:
  Handler handler_;
};

std::unique_ptr<SealedLane> Make(MessageLane* lane, const std::string& key, int self) {
  absl::StatusOr<std::unique_ptr<SealedLane>> s = SealedLane::Create(lane, key, self);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

struct Pair {
  Pair(const std::string& key0, const std::string& key1)
      : a_lane(Make(&wa, key0, 0)), b_lane(Make(&wb, key1, 1)), a(*a_lane), b(*b_lane) {
    wa.self = 0;
    wb.self = 1;
    wa.other = &wb;
    wb.other = &wa;
    a.SetMessageHandler([this](int peer, absl::string_view m) { at_a.emplace_back(peer, m); });
    b.SetMessageHandler([this](int peer, absl::string_view m) { at_b.emplace_back(peer, m); });
  }
  Wire wa, wb;
  std::unique_ptr<SealedLane> a_lane, b_lane;
  SealedLane &a, &b;
  std::vector<std::pair<int, std::string>> at_a, at_b;
};

TEST(SealedLaneTest, AMessageUnderTheJobsKeyArrivesWithoutItsSeal) {
  absl::StatusOr<std::string> key = NewLaneKey();
  ASSERT_TRUE(key.ok());
  ASSERT_EQ(key->size(), kLaneKeyBytes);
  Pair p(*key, *key);
  ASSERT_TRUE(p.a.SendMessage(1, std::make_shared<std::string>("ready: x")).ok());
  ASSERT_TRUE(p.b.SendMessage(0, std::make_shared<std::string>("")).ok());
  ASSERT_EQ(p.at_b.size(), 1u);
  EXPECT_EQ(p.at_b[0], (std::pair<int, std::string>{0, "ready: x"}));
  ASSERT_EQ(p.at_a.size(), 1u);
  EXPECT_EQ(p.at_a[0].second, "");
  EXPECT_EQ(p.wa.sent[0].size(), 8 + SealedLane::kTagBytes);
  EXPECT_EQ(p.a.max_message_bytes(), 1024 - SealedLane::kTagBytes);
}

TEST(SealedLaneTest, AnotherKeyATamperedMessageOrAFalseSenderIsDropped) {
  absl::StatusOr<std::string> k1 = NewLaneKey(), k2 = NewLaneKey();
  ASSERT_TRUE(k1.ok() && k2.ok());
  ASSERT_NE(*k1, *k2);
  Pair other_job(*k1, *k2);
  ASSERT_TRUE(other_job.a.SendMessage(1, std::make_shared<std::string>("plan")).ok());
  EXPECT_TRUE(other_job.at_b.empty());

  Pair p(*k1, *k1);
  const std::string sealed = p.a.Seal(0, 1, "plan 7");
  std::string changed = sealed;
  changed[2] ^= 1;
  p.wb.Inject(0, changed);
  p.wb.Inject(0, sealed.substr(0, 10));  // shorter than a seal
  p.wb.Inject(0, "");
  // Sealed by node 0 for node 1, but said to come from node 2.
  p.wb.Inject(2, sealed);
  // Sealed for another node than the one it reached.
  p.wb.Inject(0, p.a.Seal(0, 3, "plan 7"));
  EXPECT_TRUE(p.at_b.empty());
  p.wb.Inject(0, sealed);
  ASSERT_EQ(p.at_b.size(), 1u);
  EXPECT_EQ(p.at_b[0].second, "plan 7");
}

TEST(SealedLaneTest, OpenSaysWhy) {
  const std::string key(kLaneKeyBytes, 'k');
  Pair p(key, key);
  EXPECT_EQ(p.a.Open(0, 1, "short").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.a.Open(0, 1, std::string(40, 'x')).status().code(),
            absl::StatusCode::kPermissionDenied);
  const std::string sealed = p.b.Seal(4, 2, "m");
  absl::StatusOr<absl::string_view> ok = p.a.Open(4, 2, sealed);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "m");
}

TEST(SealedLaneTest, OnlyAKeyOfTheRightLengthIsTaken) {
  Wire w;
  EXPECT_EQ(SealedLane::Create(&w, "short", 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(SealedLane::Create(&w, std::string(kLaneKeyBytes, 'k'), 0).ok());
}

TEST(SealedLaneTest, RefusesWhatIsTooLargeForTheLaneBelow) {
  const std::string key(kLaneKeyBytes, 'k');
  Pair p(key, key);
  auto big = std::make_shared<std::string>(1024 - SealedLane::kTagBytes + 1, 'x');
  EXPECT_EQ(p.a.SendMessage(1, big).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(p.wa.sent.empty());
}

}  // namespace
}  // namespace kolo::daemon
