// Device affinity in the scheduler: keys bound to a device (BatchKey::device,
// e.g. decode-session steps whose state slot is in that device's memory)
// run only on that device's lanes; keys of no device run anywhere; tasks of
// a device none of whose lanes can serve fail at once with UNAVAILABLE while
// the other devices go on. Also DeviceAffinity, which derives the key's
// device from where the segment's tensors are.
#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "server/core/fake_clock.h"
#include "server/core/scheduler.h"
#include "server/core/segment_check.h"
#include "tests/core/scheduler_test_util.h"

namespace conv1d::testing {
namespace {

BatchKey OnDevice(int32_t device) {
  BatchKey k = KeyWithDim(16);
  k.device = device;
  return k;
}

class SchedulerAffinityTest : public ::testing::Test {
 protected:
  // Lanes 0, 1 on device 0; lanes 2, 3 on device 1; `unavailable` lanes
  // marked failed before the scheduler starts.
  void Start(std::vector<int> unavailable = {}) {
    backend_ = std::make_unique<RecordingBackend>(4, std::vector<int32_t>{0, 0, 1, 1});
    for (int lane : unavailable) backend_->SetLaneAvailable(lane, false);
    auto s = Scheduler::Create({}, backend_.get(), &clock_, &observer_);
    ASSERT_TRUE(s.ok()) << s.status();
    sched_ = std::move(s).value();
  }
  void Submit(std::unique_ptr<Task> task) {
    ASSERT_TRUE(sched_->Submit(&task).ok());
  }
  void TearDown() override { sched_.reset(); }

  FakeClock clock_;
  RecordingObserver observer_;
  Completions done_;
  std::unique_ptr<RecordingBackend> backend_;
  std::unique_ptr<Scheduler> sched_;
};

TEST_F(SchedulerAffinityTest, DeviceKeysRunOnlyOnTheirDevicesLanes) {
  Start();
  const int32_t devices[] = {0, 1, -1};
  constexpr uint64_t kTasks = 300;
  for (uint64_t tag = 1; tag <= kTasks; ++tag) {
    Submit(MakeTask(tag, OnDevice(devices[tag % 3]), &done_));
  }
  ASSERT_TRUE(done_.AwaitCalls(kTasks));
  for (uint64_t tag = 1; tag <= kTasks; ++tag) {
    EXPECT_EQ(done_.Get(tag).calls, 1) << tag;
    EXPECT_TRUE(done_.Get(tag).status.ok()) << tag;
  }
  int on_device[2] = {0, 0};
  for (const RecordedBatch& b : backend_->batches()) {
    const int32_t lane_device = b.lane < 2 ? 0 : 1;
    for (const RecordedSegment& s : b.segments) {
      // Keys of different devices are different keys: never fused.
      EXPECT_EQ(devices[s.tag % 3], b.key.device) << "tag " << s.tag;
    }
    if (b.key.device >= 0) {
      EXPECT_EQ(b.key.device, lane_device) << "lane " << b.lane;
      on_device[b.key.device] += static_cast<int>(b.segments.size());
    }
  }
  EXPECT_EQ(on_device[0], static_cast<int>(kTasks / 3));
  EXPECT_EQ(on_device[1], static_cast<int>(kTasks / 3));
}

TEST_F(SchedulerAffinityTest, TasksOfAFailedDeviceFailWhileOthersRun) {
  Start(/*unavailable=*/{2, 3});
  for (uint64_t tag = 1; tag <= 30; ++tag) {
    Submit(MakeTask(tag, OnDevice(static_cast<int32_t>(tag % 3) - 1), &done_));
  }
  ASSERT_TRUE(done_.AwaitCalls(30));
  for (uint64_t tag = 1; tag <= 30; ++tag) {
    const Outcome o = done_.Get(tag);
    EXPECT_EQ(o.calls, 1);
    if (tag % 3 == 2) {  // device 1
      EXPECT_TRUE(absl::IsUnavailable(o.status)) << tag << ": " << o.status;
      EXPECT_NE(o.status.message().find("device 1"), absl::string_view::npos) << o.status;
    } else {
      EXPECT_TRUE(o.status.ok()) << tag << ": " << o.status;
    }
  }
  for (const RecordedBatch& b : backend_->batches()) {
    EXPECT_LT(b.lane, 2);
    EXPECT_NE(b.key.device, 1);
  }
}

TEST(DeviceAffinity, FollowsTheTensorsInDeviceMemory) {
  BatchKey key = KeyWithDim(8, Op::kUpdate);
  ConvSegment seg;
  int dummy = 0;
  seg.x.data = &dummy;
  seg.weight.data = &dummy;
  seg.conv_state.data = &dummy;
  seg.y.data = &dummy;
  seg.conv_state_out.data = &dummy;
  absl::StatusOr<int32_t> d = DeviceAffinity(key, seg);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, -1);  // all in host memory

  Placement slot;
  slot.kind = MemoryKind::kDeviceOwned;
  slot.device = 1;
  seg.conv_state.where = slot;
  seg.conv_state_out.where = slot;
  d = DeviceAffinity(key, seg);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, 1);

  Placement region;
  region.kind = MemoryKind::kSharedDevice;
  region.device = 0;
  seg.x.where = region;
  d = DeviceAffinity(key, seg);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(d.status()));
  EXPECT_NE(d.status().message().find("device 0"), std::string::npos) << d.status();
  EXPECT_NE(d.status().message().find("device 1"), std::string::npos) << d.status();
}

}  // namespace
}  // namespace conv1d::testing
