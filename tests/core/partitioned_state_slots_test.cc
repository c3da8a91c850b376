// PartitionedStateSlots over host parts: slots alternate between the parts,
// reads and writes reach the right part, copies work within and across
// parts, and bad parts or slots are refused.
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "server/core/partitioned_state_slots.h"
#include "server/core/state_slots.h"

namespace conv1d {
namespace {

std::unique_ptr<StateSlots> HostPart(int32_t slots, int64_t bytes = 64) {
  StateSlotsOptions o;
  o.num_slots = slots;
  o.slot_bytes = bytes;
  auto p = HostStateSlots::Create(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return std::move(p).value();
}

TEST(PartitionedStateSlots, SlotsAlternateBetweenPartsAndCopyAcrossThem) {
  std::vector<std::unique_ptr<StateSlots>> parts;
  parts.push_back(HostPart(3));
  parts.push_back(HostPart(3));
  StateSlots* p0 = parts[0].get();
  StateSlots* p1 = parts[1].get();
  auto s = PartitionedStateSlots::Create(std::move(parts));
  ASSERT_TRUE(s.ok()) << s.status();
  PartitionedStateSlots& all = **s;
  ASSERT_EQ(all.num_slots(), 6);
  EXPECT_EQ(all.slot_bytes(), 64);
  for (int32_t slot = 0; slot < 6; ++slot) {
    StateSlots* part = slot % 2 == 0 ? p0 : p1;
    EXPECT_EQ(all.SlotData(slot), part->SlotData(slot / 2)) << slot;
  }
  const char msg[] = "state of slot three";
  ASSERT_TRUE(all.Write(3, 8, msg, sizeof(msg)).ok());
  char back[sizeof(msg)] = {};
  ASSERT_TRUE(p1->Read(1, 8, back, sizeof(back)).ok());
  EXPECT_STREQ(back, msg);
  // Across parts (3 -> 4: part 1 -> part 0) and within one (3 -> 5).
  for (int32_t dst : {4, 5}) {
    ASSERT_TRUE(all.Copy(3, dst, 64).ok()) << dst;
    std::memset(back, 0, sizeof(back));
    ASSERT_TRUE(all.Read(dst, 8, back, sizeof(back)).ok());
    EXPECT_STREQ(back, msg) << dst;
  }
  EXPECT_TRUE(absl::IsOutOfRange(all.Write(6, 0, msg, 4)));
  EXPECT_TRUE(absl::IsOutOfRange(all.Read(-1, 0, back, 4)));
  EXPECT_TRUE(absl::IsOutOfRange(all.Copy(0, 1, 65)));
}

TEST(PartitionedStateSlots, PartsMustMatch) {
  std::vector<std::unique_ptr<StateSlots>> none;
  EXPECT_TRUE(absl::IsInvalidArgument(PartitionedStateSlots::Create(std::move(none)).status()));
  std::vector<std::unique_ptr<StateSlots>> uneven;
  uneven.push_back(HostPart(3));
  uneven.push_back(HostPart(4));
  EXPECT_TRUE(absl::IsInvalidArgument(PartitionedStateSlots::Create(std::move(uneven)).status()));
}

}  // namespace
}  // namespace conv1d
