#include "daemon/session/slot_validator.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

using abi::v1::kMaxDims;
using abi::v1::kMaxNameBytes;
using abi::v1::SubmitSlot;

constexpr int kJobSize = 4;
constexpr uint64_t kArenaBytes = 4096;

class SlotValidatorTest : public ::testing::Test {
 protected:
  SlotValidatorTest() : storage_(kArenaBytes) {
    arena_.base = storage_.data();
    arena_.bytes = storage_.size();
  }

  // A valid float32 allreduce of shape [4,4] named "grad/w1": input at 0,
  // output at 1024.
  static SubmitSlot AllreduceSlot() {
    SubmitSlot s;
    std::memset(&s, 0, sizeof(s));
    s.request_id = 77;
    s.kind = static_cast<uint32_t>(CollectiveKind::kAllreduce);
    s.dtype = static_cast<uint32_t>(DType::kFloat32);
    s.reduce_op = static_cast<uint32_t>(ReduceOp::kAverage);
    s.prescale = 0.5;
    s.postscale = 2.0;
    s.input_offset = 0;
    s.output_offset = 1024;
    s.ndim = 2;
    s.shape[0] = 4;
    s.shape[1] = 4;
    s.byte_length = 4 * 4 * 4;
    SetName(&s, "grad/w1");
    return s;
  }

  static void SetName(SubmitSlot* s, const std::string& name) {
    std::memcpy(s->name, name.data(), name.size());
    s->name_length = static_cast<uint32_t>(name.size());
  }

  // Expects `slot` to be refused with `code` and a message containing `what`.
  void ExpectRejected(const SubmitSlot& slot, absl::StatusCode code, const std::string& what) {
    absl::StatusOr<Request> r = ValidateSlot(slot, arena_, kJobSize);
    ASSERT_FALSE(r.ok()) << "accepted a slot that should fail with: " << what;
    EXPECT_EQ(r.status().code(), code) << r.status();
    EXPECT_NE(std::string(r.status().message()).find(what), std::string::npos)
        << "message \"" << r.status().message() << "\" does not say \"" << what << "\"";
  }

  void ExpectRejected(const SubmitSlot& slot, const std::string& what) {
    ExpectRejected(slot, absl::StatusCode::kInvalidArgument, what);
  }

  std::vector<uint8_t> storage_;
  ArenaBounds arena_;
};

TEST_F(SlotValidatorTest, ValidAllreduceResolvesPointersShapeAndName) {
  absl::StatusOr<Request> r = ValidateSlot(AllreduceSlot(), arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request_id, 77u);
  EXPECT_EQ(r->kind, CollectiveKind::kAllreduce);
  EXPECT_EQ(r->dtype, DType::kFloat32);
  EXPECT_EQ(r->op, ReduceOp::kAverage);
  EXPECT_EQ(r->prescale, 0.5);
  EXPECT_EQ(r->postscale, 2.0);
  EXPECT_EQ(r->shape, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(r->name, "grad/w1");
  EXPECT_EQ(r->bytes, 64u);
  EXPECT_EQ(r->input, storage_.data());
  EXPECT_EQ(r->output, storage_.data() + 1024);
  // Left for the caller.
  EXPECT_EQ(r->rank, -1);
  EXPECT_EQ(r->origin, nullptr);
}

TEST_F(SlotValidatorTest, ValidBroadcastKeepsRootAndResolvesInPlaceBuffer) {
  SubmitSlot s = AllreduceSlot();
  s.kind = static_cast<uint32_t>(CollectiveKind::kBroadcast);
  s.dtype = static_cast<uint32_t>(DType::kInt64);
  s.root_rank = kJobSize - 1;
  s.ndim = 1;
  s.shape[0] = 10;
  s.byte_length = 80;
  s.input_offset = 512;
  s.output_offset = 512;  // in place: exactly equal ranges are fine
  SetName(&s, "params/embedding");
  absl::StatusOr<Request> r = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kind, CollectiveKind::kBroadcast);
  EXPECT_EQ(r->dtype, DType::kInt64);
  EXPECT_EQ(r->root_rank, kJobSize - 1);
  EXPECT_EQ(r->shape, (std::vector<int64_t>{10}));
  EXPECT_EQ(r->name, "params/embedding");
  EXPECT_EQ(r->bytes, 80u);
  EXPECT_EQ(r->input, storage_.data() + 512);
  EXPECT_EQ(r->output, storage_.data() + 512);
}

TEST_F(SlotValidatorTest, NameIsTakenByLengthNotByTerminator) {
  SubmitSlot s = AllreduceSlot();
  // Bytes after name_length are not part of the name.
  std::memcpy(s.name, "abcdef", 6);
  s.name_length = 3;
  absl::StatusOr<Request> r = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name, "abc");
}

TEST_F(SlotValidatorTest, NameOfExactlyMaxBytesIsAccepted) {
  SubmitSlot s = AllreduceSlot();
  SetName(&s, std::string(kMaxNameBytes, 'n'));
  absl::StatusOr<Request> r = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name.size(), kMaxNameBytes);
}

TEST_F(SlotValidatorTest, RejectsUnknownCollectiveKind) {
  SubmitSlot s = AllreduceSlot();
  s.kind = 0;
  ExpectRejected(s, "unknown collective kind 0");
  s.kind = kMaxCollectiveKind + 1;
  ExpectRejected(s, "unknown collective kind 10");
  s.kind = 0xffffffffu;
  ExpectRejected(s, "unknown collective kind");
}

TEST_F(SlotValidatorTest, RejectsUnknownDtype) {
  SubmitSlot s = AllreduceSlot();
  s.dtype = kNumDTypes;
  ExpectRejected(s, "unknown dtype 11");
  s.dtype = 0xffffffffu;
  ExpectRejected(s, "unknown dtype");
}

TEST_F(SlotValidatorTest, RejectsUnknownReduceOp) {
  SubmitSlot s = AllreduceSlot();
  s.reduce_op = kNumReduceOps;
  ExpectRejected(s, "unknown reduce op 6");
}

TEST_F(SlotValidatorTest, RejectsEmptyName) {
  SubmitSlot s = AllreduceSlot();
  s.name_length = 0;
  ExpectRejected(s, "empty");
}

TEST_F(SlotValidatorTest, RejectsNameLongerThanMax) {
  SubmitSlot s = AllreduceSlot();
  s.name_length = kMaxNameBytes + 1;
  ExpectRejected(s, "name length 201 exceeds 200");
  s.name_length = 0xffffffffu;
  ExpectRejected(s, "exceeds 200");
}

TEST_F(SlotValidatorTest, RejectsControlCharactersInName) {
  for (char c : {'\0', '\n', '\t', '\x1b', '\x7f'}) {
    SubmitSlot s = AllreduceSlot();
    std::string name = "grad/w1";
    name[4] = c;
    SetName(&s, name);
    ExpectRejected(s, "control characters");
  }
}

TEST_F(SlotValidatorTest, RejectsANameThatIsNotUtf8) {
  // Names travel in protobuf strings between daemons and to koloctl, and in
  // JSON timelines.
  for (const char* bad : {"grad/\xff", "w\xc3", "\xed\xa0\x80x"}) {
    SubmitSlot s = AllreduceSlot();
    SetName(&s, bad);
    ExpectRejected(s, "not UTF-8");
  }
  SubmitSlot s = AllreduceSlot();
  SetName(&s, "caf\xc3\xa9/\xe2\x82\xac");
  EXPECT_TRUE(ValidateSlot(s, arena_, kJobSize).ok());
}

TEST_F(SlotValidatorTest, RejectsMoreThanMaxDims) {
  SubmitSlot s = AllreduceSlot();
  s.ndim = kMaxDims + 1;
  ExpectRejected(s, "9 dimensions, at most 8");
}

TEST_F(SlotValidatorTest, AcceptsExactlyMaxDims) {
  SubmitSlot s = AllreduceSlot();
  s.ndim = kMaxDims;
  for (uint32_t d = 0; d < kMaxDims; ++d) s.shape[d] = 2;
  s.byte_length = 256 * 4;
  absl::StatusOr<Request> r = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape.size(), kMaxDims);
}

TEST_F(SlotValidatorTest, RejectsNegativeDimension) {
  SubmitSlot s = AllreduceSlot();
  s.shape[1] = -4;
  ExpectRejected(s, "negative dimension -4");
}

TEST_F(SlotValidatorTest, RejectsShapeWhoseElementCountOverflows) {
  SubmitSlot s = AllreduceSlot();
  s.ndim = 3;
  s.shape[0] = int64_t{1} << 31;
  s.shape[1] = int64_t{1} << 31;
  s.shape[2] = 4;
  s.byte_length = 0;
  ExpectRejected(s, "shape overflows");
}

TEST_F(SlotValidatorTest, RejectsShapeWhoseByteCountOverflows) {
  // 2^61 float64 elements are 2^64 bytes, which wraps to 0 in 64 bits: a
  // byte_length of 0 must not pass for it.
  SubmitSlot s = AllreduceSlot();
  s.dtype = static_cast<uint32_t>(DType::kFloat64);
  s.ndim = 1;
  s.shape[0] = int64_t{1} << 61;
  s.byte_length = 0;
  ExpectRejected(s, "shape overflows");
  s.shape[0] = int64_t{1} << 62;
  ExpectRejected(s, "shape overflows");
}

TEST_F(SlotValidatorTest, RejectsByteLengthThatDoesNotMatchShapeAndDtype) {
  SubmitSlot s = AllreduceSlot();
  s.byte_length = 63;
  ExpectRejected(s, "byte length 63 but shape and float32 need 64");
  s.byte_length = 65;
  ExpectRejected(s, "byte length 65");
  // The right count for float16, the wrong one for float32.
  s.byte_length = 32;
  ExpectRejected(s, "byte length 32");
}

TEST_F(SlotValidatorTest, RejectsInputRangeOutsideArena) {
  SubmitSlot s = AllreduceSlot();
  s.input_offset = kArenaBytes - 63;  // one byte past the end
  ExpectRejected(s, absl::StatusCode::kOutOfRange, "outside the arena");
  s.input_offset = kArenaBytes + 1;
  ExpectRejected(s, absl::StatusCode::kOutOfRange, "outside the arena");
}

TEST_F(SlotValidatorTest, AcceptsRangeEndingExactlyAtArenaEnd) {
  SubmitSlot s = AllreduceSlot();
  s.output_offset = kArenaBytes - 64;
  absl::StatusOr<Request> r = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output, storage_.data() + kArenaBytes - 64);
}

TEST_F(SlotValidatorTest, RejectsOutputRangeOutsideArena) {
  SubmitSlot s = AllreduceSlot();
  s.output_offset = kArenaBytes;
  ExpectRejected(s, absl::StatusCode::kOutOfRange, "outside the arena");
}

TEST_F(SlotValidatorTest, RejectsOffsetsWhoseEndWrapsAroundUint64) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  SubmitSlot s = AllreduceSlot();
  s.input_offset = kMax - 10;  // offset + 64 wraps to 53, inside the arena
  ExpectRejected(s, absl::StatusCode::kOutOfRange, "outside the arena");
  s = AllreduceSlot();
  s.output_offset = kMax;
  ExpectRejected(s, absl::StatusCode::kOutOfRange, "outside the arena");
  s = AllreduceSlot();
  s.output_offset = kMax - 63;  // offset + 64 wraps to exactly 0
  ExpectRejected(s, absl::StatusCode::kOutOfRange, "outside the arena");
}

TEST_F(SlotValidatorTest, RejectsPartiallyOverlappingInputAndOutput) {
  SubmitSlot s = AllreduceSlot();
  s.input_offset = 0;
  s.output_offset = 32;  // output starts inside input
  ExpectRejected(s, "overlap");
  s.input_offset = 96;
  s.output_offset = 64;  // input starts inside output
  ExpectRejected(s, "overlap");
  s.input_offset = 100;
  s.output_offset = 101;
  ExpectRejected(s, "overlap");
}

TEST_F(SlotValidatorTest, AcceptsAdjacentAndIdenticalInputAndOutput) {
  SubmitSlot s = AllreduceSlot();
  s.input_offset = 0;
  s.output_offset = 64;  // touches, does not overlap
  EXPECT_TRUE(ValidateSlot(s, arena_, kJobSize).ok());
  s.input_offset = 128;
  s.output_offset = 64;
  EXPECT_TRUE(ValidateSlot(s, arena_, kJobSize).ok());
  s.input_offset = 200;
  s.output_offset = 200;
  EXPECT_TRUE(ValidateSlot(s, arena_, kJobSize).ok());
}

TEST_F(SlotValidatorTest, RejectsBroadcastRootOutsideJob) {
  SubmitSlot s = AllreduceSlot();
  s.kind = static_cast<uint32_t>(CollectiveKind::kBroadcast);
  s.root_rank = -1;
  ExpectRejected(s, "root rank -1 outside [0, 4)");
  s.root_rank = kJobSize;
  ExpectRejected(s, "root rank 4 outside [0, 4)");
  s.root_rank = std::numeric_limits<int32_t>::min();
  ExpectRejected(s, "outside [0, 4)");
  s.root_rank = 0;
  EXPECT_TRUE(ValidateSlot(s, arena_, kJobSize).ok());
}

TEST_F(SlotValidatorTest, RejectsNonFiniteScaleFactors) {
  const double kBad[] = {std::numeric_limits<double>::quiet_NaN(),
                         std::numeric_limits<double>::infinity(),
                         -std::numeric_limits<double>::infinity()};
  for (double bad : kBad) {
    SubmitSlot s = AllreduceSlot();
    s.prescale = bad;
    ExpectRejected(s, "finite");
    s = AllreduceSlot();
    s.postscale = bad;
    ExpectRejected(s, "finite");
  }
}

TEST_F(SlotValidatorTest, Int16AndBoolHaveTheirSizes) {
  SubmitSlot s = AllreduceSlot();  // [4,4]
  s.dtype = static_cast<uint32_t>(DType::kInt16);
  s.byte_length = 4 * 4 * 2;
  absl::StatusOr<Request> r = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->dtype, DType::kInt16);
  EXPECT_EQ(r->bytes, 32u);
  s.byte_length = 4 * 4 * 4;
  ExpectRejected(s, "byte length 64 but shape and int16 need 32");

  s = AllreduceSlot();
  s.dtype = static_cast<uint32_t>(DType::kBool);
  s.reduce_op = static_cast<uint32_t>(ReduceOp::kMax);
  s.prescale = 1.0;
  s.postscale = 1.0;
  s.byte_length = 4 * 4;
  r = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->dtype, DType::kBool);
  EXPECT_EQ(r->bytes, 16u);
}

TEST_F(SlotValidatorTest, Uint16HasItsSizeAverageAndScaling) {
  SubmitSlot s = AllreduceSlot();  // [4,4]
  s.dtype = static_cast<uint32_t>(DType::kUint16);
  s.byte_length = 4 * 4 * 2;
  absl::StatusOr<Request> r = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->dtype, DType::kUint16);
  EXPECT_EQ(r->bytes, 32u);
  s.byte_length = 4 * 4;
  ExpectRejected(s, "byte length 16 but shape and uint16 need 32");
  s.byte_length = 4 * 4 * 2;
  s.reduce_op = static_cast<uint32_t>(ReduceOp::kAverage);
  s.prescale = 0.5;
  s.postscale = 3.0;
  EXPECT_TRUE(ValidateSlot(s, arena_, kJobSize).ok());
  // The dtype past uint16 is unknown.
  s.dtype = static_cast<uint32_t>(DType::kUint16) + 1;
  ExpectRejected(s, "unknown dtype 11");
}

TEST_F(SlotValidatorTest, BoolReductionsHaveNoAverageAndNoScaling) {
  SubmitSlot s = AllreduceSlot();
  s.dtype = static_cast<uint32_t>(DType::kBool);
  s.byte_length = 4 * 4;
  s.prescale = 1.0;
  s.postscale = 1.0;
  s.reduce_op = static_cast<uint32_t>(ReduceOp::kAverage);
  ExpectRejected(s, "allreduce \"grad/w1\": bool has no average");
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    s.reduce_op = static_cast<uint32_t>(op);
    EXPECT_TRUE(ValidateSlot(s, arena_, kJobSize).ok()) << ReduceOpName(op);
  }
  s.reduce_op = static_cast<uint32_t>(ReduceOp::kSum);
  s.prescale = 2.0;
  ExpectRejected(s, "bool takes no scale factor (prescale 2, postscale 1)");
  s.prescale = 1.0;
  s.postscale = 0.5;
  ExpectRejected(s, "bool takes no scale factor (prescale 1, postscale 0.5)");
  // Reducescatter checks the same.
  s.kind = static_cast<uint32_t>(CollectiveKind::kReducescatter);
  ExpectRejected(s, "reducescatter \"grad/w1\": bool takes no scale factor");
  s.postscale = 1.0;
  s.reduce_op = static_cast<uint32_t>(ReduceOp::kAverage);
  ExpectRejected(s, "reducescatter \"grad/w1\": bool has no average");
  // A broadcast carries no op: its scale fields are not read.
  s.kind = static_cast<uint32_t>(CollectiveKind::kBroadcast);
  s.postscale = 3.0;
  EXPECT_TRUE(ValidateSlot(s, arena_, kJobSize).ok());
  // Average and scaling of int16 are fine.
  s = AllreduceSlot();
  s.dtype = static_cast<uint32_t>(DType::kInt16);
  s.byte_length = 4 * 4 * 2;
  EXPECT_TRUE(ValidateSlot(s, arena_, kJobSize).ok());
}

TEST_F(SlotValidatorTest, AcceptsTensorWithAZeroDimension) {
  SubmitSlot s = AllreduceSlot();
  s.ndim = 3;
  s.shape[0] = 3;
  s.shape[1] = 0;
  s.shape[2] = 5;
  s.byte_length = 0;
  s.input_offset = kArenaBytes;  // an empty range at the very end is inside
  s.output_offset = 8;
  absl::StatusOr<Request> r = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->bytes, 0u);
  EXPECT_EQ(r->shape, (std::vector<int64_t>{3, 0, 5}));
}

TEST_F(SlotValidatorTest, ZeroDimensionDoesNotHideALaterNegativeOne) {
  SubmitSlot s = AllreduceSlot();
  s.ndim = 2;
  s.shape[0] = 0;
  s.shape[1] = -1;
  s.byte_length = 0;
  ExpectRejected(s, "negative dimension -1");
}

TEST_F(SlotValidatorTest, AcceptsScalarWithNoDimensions) {
  SubmitSlot s = AllreduceSlot();
  s.ndim = 0;
  s.shape[0] = -7;    // beyond ndim: ignored
  s.byte_length = 4;  // one float32
  absl::StatusOr<Request> r = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->shape.empty());
  EXPECT_EQ(r->bytes, 4u);
  s.byte_length = 0;
  ExpectRejected(s, "byte length 0");
}

// A valid device allreduce: the [4,4] float32 tensors on CUDA device 1, no
// arena offsets.
SubmitSlot DeviceSlot() {
  SubmitSlot s;
  std::memset(&s, 0, sizeof(s));
  s.request_id = 78;
  s.kind = static_cast<uint32_t>(CollectiveKind::kAllreduce);
  s.dtype = static_cast<uint32_t>(DType::kFloat32);
  s.reduce_op = static_cast<uint32_t>(ReduceOp::kSum);
  s.prescale = 1.0;
  s.postscale = 1.0;
  s.ndim = 2;
  s.shape[0] = 4;
  s.shape[1] = 4;
  s.byte_length = 64;
  const std::string name = "grad/gpu";
  std::memcpy(s.name, name.data(), name.size());
  s.name_length = static_cast<uint32_t>(name.size());
  s.flags = abi::v1::kSlotFlagDevice;
  for (abi::v1::DeviceTensorSlot* t : {&s.device_input, &s.device_output}) {
    std::memset(t->memory_handle, 0xab, sizeof(t->memory_handle));
    std::memset(t->event_handle, 0xcd, sizeof(t->event_handle));
    t->offset = 4096;
    t->bytes = 64;
    t->device = 1;
  }
  s.device_output.offset = 8192;
  s.device_output.event_handle[0] = 0x11;
  return s;
}

TEST_F(SlotValidatorTest, DeviceSlotBecomesADeviceRequest) {
  absl::StatusOr<Request> r = ValidateSlot(DeviceSlot(), arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->device.has_value());
  EXPECT_EQ(r->input, nullptr);
  EXPECT_EQ(r->output, nullptr);
  EXPECT_EQ(r->device->input.device, 1);
  EXPECT_EQ(r->device->input.offset, 4096u);
  EXPECT_EQ(r->device->output.offset, 8192u);
  EXPECT_EQ(r->device->input.bytes, 64u);
  EXPECT_EQ(r->device->input.memory[63], 0xab);
  EXPECT_EQ(r->device->input.event[0], 0xcd);
  EXPECT_EQ(r->device->output.event[0], 0x11);
}

TEST_F(SlotValidatorTest, HostSlotHasNoDeviceRequest) {
  absl::StatusOr<Request> r = ValidateSlot(AllreduceSlot(), arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->device.has_value());
}

TEST_F(SlotValidatorTest, DeviceFieldsWithoutTheFlagAreRefused) {
  SubmitSlot s = AllreduceSlot();
  s.device_input.bytes = 64;
  ExpectRejected(s, "without the device flag");
  s = AllreduceSlot();
  s.device_output.memory_handle[5] = 1;
  ExpectRejected(s, "without the device flag");
}

// A part of a larger tensor: the whole shape, this part's bytes.
TEST_F(SlotValidatorTest, APartKeepsTheWholeShapeAndItsOwnBytes) {
  SubmitSlot s = AllreduceSlot();
  s.flags = abi::v1::kSlotFlagPart;
  s.byte_length = 20;
  absl::StatusOr<Request> r = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(r->bytes, 20u);
  s.byte_length = 64;  // the whole tensor as one part
  EXPECT_TRUE(ValidateSlot(s, arena_, kJobSize).ok());
  s.byte_length = 0;
  ExpectRejected(s, "a part of 0 bytes of a float32 tensor of 64 bytes");
  s.byte_length = 68;
  ExpectRejected(s, "a part of 68 bytes");
  s.byte_length = 6;  // not whole elements
  ExpectRejected(s, "a part of 6 bytes");
  s.byte_length = 16;
  s.kind = static_cast<uint32_t>(CollectiveKind::kAllgather);
  ExpectRejected(s, "only allreduce and broadcast go in parts");
  s = AllreduceSlot();
  s.flags = abi::v1::kSlotFlagPart | abi::v1::kSlotFlagDevice;
  ExpectRejected(s, "unknown slot flags");
}

// A later part's name ends in the separator and its number; nothing else
// may hold it, so a tensor's name is never a part's.
TEST_F(SlotValidatorTest, OnlyAPartNameEndsInThePartSeparator) {
  const std::string sep(1, abi::v1::kPartSeparator);
  SubmitSlot s = AllreduceSlot();
  s.flags = abi::v1::kSlotFlagPart;
  s.byte_length = 16;
  SetName(&s, "grad/w1" + sep + "12");
  absl::StatusOr<Request> r = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name, "grad/w1" + sep + "12");
  SetName(&s, "grad/w1" + sep + "18446744073709551615");  // 20 digits
  EXPECT_TRUE(ValidateSlot(s, arena_, kJobSize).ok());
  for (const std::string& bad :
       {"grad/w1" + sep, sep + "1", "grad/w1" + sep + "1x", "grad" + sep + "1" + sep + "2",
        "grad/w1" + sep + "123456789012345678901", "grad/w1" + sep + "-1"}) {
    SetName(&s, bad);
    ExpectRejected(s, "control characters");
  }
  // The same name without the part flag is a tensor's: refused.
  s = AllreduceSlot();
  SetName(&s, "grad/w1" + sep + "1");
  ExpectRejected(s, "control characters");
}

TEST_F(SlotValidatorTest, UnknownFlagsAreRefused) {
  SubmitSlot s = AllreduceSlot();
  s.flags = 0x80;
  ExpectRejected(s, "unknown slot flags 128");
}

TEST_F(SlotValidatorTest, DeviceSizesMustEqualTheRequest) {
  SubmitSlot s = DeviceSlot();
  s.device_input.bytes = 60;
  ExpectRejected(s, "device input of 60 bytes, the request has 64");
  s = DeviceSlot();
  s.device_output.bytes = 128;
  ExpectRejected(s, "device output of 128 bytes, the request has 64");
}

TEST_F(SlotValidatorTest, DeviceOrdinalMustBeSane) {
  SubmitSlot s = DeviceSlot();
  s.device_input.device = -1;
  ExpectRejected(s, "CUDA device -1");
  s = DeviceSlot();
  s.device_output.device = kMaxDeviceOrdinal;
  ExpectRejected(s, "CUDA device 64");
  s = DeviceSlot();
  s.device_output.device = 0;
  ExpectRejected(s, "input on CUDA device 1, output on device 0");
}

TEST_F(SlotValidatorTest, DeviceRequestUsesNoArenaOffsets) {
  SubmitSlot s = DeviceSlot();
  s.input_offset = 1024;
  ExpectRejected(s, "uses no arena offsets");
  s = DeviceSlot();
  s.output_offset = 64;
  ExpectRejected(s, "uses no arena offsets");
}

TEST_F(SlotValidatorTest, DeviceOffsetMustNotOverflow) {
  SubmitSlot s = DeviceSlot();
  s.device_input.offset = std::numeric_limits<uint64_t>::max() - 10;
  ExpectRejected(s, "overflows");
}

TEST_F(SlotValidatorTest, DeviceTensorsForEveryKindButAlltoall) {
  SubmitSlot s = DeviceSlot();
  s.kind = static_cast<uint32_t>(CollectiveKind::kBroadcast);
  s.root_rank = 0;
  absl::StatusOr<Request> broadcast = ValidateSlot(s, arena_, kJobSize);
  EXPECT_TRUE(broadcast.ok()) << broadcast.status();
  s = DeviceSlot();
  s.kind = static_cast<uint32_t>(CollectiveKind::kAlltoall);
  ExpectRejected(s, absl::StatusCode::kUnimplemented, "allgather and reducescatter so far");
}

// An allgather's device output holds every rank's rows, a reducescatter's
// its own share: their sizes differ from the input's (the backend checks
// them exactly), but never the wrong way.
TEST_F(SlotValidatorTest, DeviceGatherAndScatterOutputsHaveTheirOwnSizes) {
  SubmitSlot s = DeviceSlot();
  s.kind = static_cast<uint32_t>(CollectiveKind::kAllgather);
  s.device_output.bytes = 64 * 3;
  absl::StatusOr<Request> gather = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(gather.ok()) << gather.status();
  EXPECT_EQ(gather->device->output.bytes, 192u);
  s.device_output.bytes = 32;
  ExpectRejected(s, "device output of 32 bytes cannot hold its result");
  s = DeviceSlot();
  s.kind = static_cast<uint32_t>(CollectiveKind::kReducescatter);
  s.device_output.bytes = 16;
  absl::StatusOr<Request> scatter = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(scatter.ok()) << scatter.status();
  EXPECT_EQ(scatter->device->output.bytes, 16u);
  s.device_output.bytes = 128;
  ExpectRejected(s, "device output of 128 bytes cannot hold its result");
  s.device_output.bytes = 16;
  s.device_input.bytes = 60;
  ExpectRejected(s, "device input of 60 bytes, the request has 64");
}

// A refusal of allreduce "grad/w1" in process set 2, group 9 of 3, whose
// reason is at arena offset 64.
SubmitSlot RefusalSlot(uint8_t* arena, const std::string& reason) {
  SubmitSlot s;
  std::memset(&s, 0, sizeof(s));
  s.request_id = 78;
  s.kind = static_cast<uint32_t>(CollectiveKind::kAllreduce);
  std::memcpy(s.name, "grad/w1", 7);
  s.name_length = 7;
  s.process_set = 2;
  s.group_id = 9;
  s.group_size = 3;
  s.flags = abi::v1::kSlotFlagRefusal;
  s.input_offset = 64;
  s.byte_length = reason.size();
  std::memcpy(arena + 64, reason.data(), reason.size());
  return s;
}

TEST_F(SlotValidatorTest, RefusalCarriesNameSetGroupAndReason) {
  SubmitSlot s = RefusalSlot(arena_.base, "bool has no average\n(sum, min)");
  absl::StatusOr<Request> r = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request_id, 78u);
  EXPECT_EQ(r->kind, CollectiveKind::kAllreduce);
  EXPECT_EQ(r->name, "grad/w1");
  EXPECT_EQ(r->process_set, 2);
  EXPECT_EQ(r->group_id, 9u);
  EXPECT_EQ(r->group_size, 3u);
  ASSERT_TRUE(r->refusal.has_value());
  EXPECT_EQ(*r->refusal, "bool has no average (sum, min)");  // control characters blanked
  EXPECT_EQ(r->input, nullptr);
  EXPECT_FALSE(r->device.has_value());
}

TEST_F(SlotValidatorTest, RefusalWithoutAReasonSaysSo) {
  SubmitSlot s = RefusalSlot(arena_.base, "");
  absl::StatusOr<Request> r = ValidateSlot(s, arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r->refusal, "no reason given");
}

TEST_F(SlotValidatorTest, RefusalIsBounded) {
  SubmitSlot s = RefusalSlot(arena_.base, "x");
  s.byte_length = abi::v1::kMaxMessageBytes + 1;
  ExpectRejected(s, absl::StatusCode::kOutOfRange, "reason");
  s = RefusalSlot(arena_.base, "x");
  s.input_offset = kArenaBytes;
  ExpectRejected(s, absl::StatusCode::kOutOfRange, "outside the arena");
  s = RefusalSlot(arena_.base, "x");
  s.dtype = 3;  // a tensor field
  ExpectRejected(s, "fields besides");
  s = RefusalSlot(arena_.base, "x");
  s.flags |= abi::v1::kSlotFlagDevice;
  ExpectRejected(s, "besides the refusal");
  s = RefusalSlot(arena_.base, "x");
  s.kind = static_cast<uint32_t>(CollectiveKind::kJoin);
  ExpectRejected(s, "cannot be refused");
  s = RefusalSlot(arena_.base, "x");
  s.kind = static_cast<uint32_t>(CollectiveKind::kBroadcast);  // broadcasts do not group
  ExpectRejected(s, "group of 3");
  s = RefusalSlot(arena_.base, "x");
  s.name_length = 0;
  ExpectRejected(s, "empty");
}

}  // namespace
}  // namespace kolo::daemon

namespace kolo::daemon {
namespace {

class CallerMemorySlotTest : public SlotValidatorTest {
 protected:
  static SubmitSlot ByAddress() {
    SubmitSlot s = AllreduceSlot();
    s.flags = abi::v1::kSlotFlagCallerMemory;
    s.input_offset = 0x7f0000001000;  // addresses in the rank's process
    s.output_offset = 0x7f0000001000;
    return s;
  }
};

TEST_F(CallerMemorySlotTest, AnAllowedSessionNamesTensorsByAddress) {
  arena_.caller_memory = true;
  absl::StatusOr<Request> r = ValidateSlot(ByAddress(), arena_, kJobSize);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->caller_input, 0x7f0000001000u);
  EXPECT_EQ(r->caller_output, 0x7f0000001000u);
  EXPECT_EQ(r->input, nullptr);
  EXPECT_EQ(r->output, nullptr);
  SubmitSlot b = ByAddress();
  b.kind = static_cast<uint32_t>(CollectiveKind::kBroadcast);
  b.output_offset = b.input_offset + 4096;
  EXPECT_TRUE(ValidateSlot(b, arena_, kJobSize).ok());
}

TEST_F(CallerMemorySlotTest, WhatIsRefused) {
  ExpectRejected(ByAddress(), absl::StatusCode::kPermissionDenied,
                 "did not offer this session caller memory");
  arena_.caller_memory = true;
  SubmitSlot s = ByAddress();
  s.kind = static_cast<uint32_t>(CollectiveKind::kAllgather);
  ExpectRejected(s, "allreduce and broadcast only");
  s = ByAddress();
  s.input_offset = 0;
  ExpectRejected(s, "tensor at 0");
  s = ByAddress();
  s.output_offset = ~uint64_t{0} - 8;  // wraps
  ExpectRejected(s, "for 64 bytes");
  s = ByAddress();
  s.output_offset = s.input_offset + 8;
  ExpectRejected(s, "overlap");
  s = ByAddress();
  s.flags |= abi::v1::kSlotFlagDevice;
  ExpectRejected(s, "unknown slot flags");
}

}  // namespace
}  // namespace kolo::daemon
