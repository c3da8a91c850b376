// SharedMemoryRegistry against real POSIX shared-memory objects: mapping,
// bounds, the in-use rule of Unregister, objects that shrink or vanish, and
// which principal's calls reach a region.
#include "server/core/shm_registry.h"

#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/shm_object.h"

namespace conv1d {
namespace {

using ::conv1d::testing::ShmObject;
using ::testing::HasSubstr;

std::unique_ptr<SharedMemoryRegistry> MakeRegistry(int32_t max_regions = 8) {
  SharedMemoryRegistryOptions options;
  options.max_regions = max_regions;
  absl::StatusOr<std::unique_ptr<SharedMemoryRegistry>> r =
      SharedMemoryRegistry::Create(options);
  EXPECT_TRUE(r.ok()) << r.status();
  return *std::move(r);
}

TEST(SharedMemoryRegistry, ResolvedSpansReadAndWriteTheClientsBytes) {
  ShmObject obj(3 * 4096);
  auto reg = MakeRegistry();
  // A region that starts inside a page: the mapping must still line up.
  ASSERT_TRUE(reg->Register("r", obj.key(), 4096 + 100, 8000).ok());
  std::memcpy(obj.data() + 4096 + 100 + 16, "hello", 5);
  absl::StatusOr<SharedSpan> span = reg->Resolve("r", 16, 5, "input 'x'");
  ASSERT_TRUE(span.ok()) << span.status();
  EXPECT_EQ(std::memcmp(span->data.get(), "hello", 5), 0);
  // No pinner: pageable, so backends stage it like heap memory.
  EXPECT_EQ(span->where.kind, MemoryKind::kHostHeap);
  EXPECT_EQ(span->where.offset, 16);
  EXPECT_NE(span->where.region, 0u);
  std::memcpy(span->data.get(), "HELLO", 5);
  EXPECT_EQ(std::memcmp(obj.data() + 4096 + 116, "HELLO", 5), 0);

  absl::StatusOr<std::vector<SharedRegionInfo>> status = reg->Status("");
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->size(), 1u);
  EXPECT_EQ((*status)[0].key, obj.key());
  EXPECT_EQ((*status)[0].offset, 4196);
  EXPECT_EQ((*status)[0].byte_size, 8000);
  EXPECT_EQ((*status)[0].in_use, 1);
}

// Records what it pinned; refuses when told to.
class FakePinner final : public HostMemoryPinner {
 public:
  explicit FakePinner(bool works) : works_(works) {}
  absl::Status Pin(void* data, int64_t bytes) override {
    if (!works_) return absl::InternalError("no");
    ++pinned;
    last_bytes = bytes;
    return absl::OkStatus();
  }
  void Unpin(void*) override { ++unpinned; }
  int pinned = 0, unpinned = 0;
  int64_t last_bytes = 0;

 private:
  const bool works_;
};

TEST(SharedMemoryRegistry, PinnedRegionsAreSharedHostAndUnpinnedWhenReleased) {
  ShmObject obj(3 * 4096);
  auto pinner = std::make_shared<FakePinner>(true);
  SharedMemoryRegistryOptions options;
  options.pinner = pinner;
  auto reg = *SharedMemoryRegistry::Create(options);
  ASSERT_TRUE(reg->Register("r", obj.key(), 4096, 5000).ok());
  EXPECT_EQ(pinner->pinned, 1);
  EXPECT_GE(pinner->last_bytes, 5000);
  absl::StatusOr<SharedSpan> span = reg->Resolve("r", 0, 8, "x");
  ASSERT_TRUE(span.ok());
  EXPECT_EQ(span->where.kind, MemoryKind::kSharedHost);
  EXPECT_TRUE(span->where.page_locked());
  EXPECT_TRUE((*reg->Status("r"))[0].page_locked);
  span->lease.reset();
  ASSERT_TRUE(reg->Unregister("r").ok());
  EXPECT_EQ(pinner->unpinned, 0);  // the span still maps it
  span = absl::UnknownError("released");
  EXPECT_EQ(pinner->unpinned, 1);

  // A region the pinner refuses still serves, as pageable memory.
  auto refusing = std::make_shared<FakePinner>(false);
  options.pinner = refusing;
  auto reg2 = *SharedMemoryRegistry::Create(options);
  ASSERT_TRUE(reg2->Register("p", obj.key(), 0, 64).ok());
  absl::StatusOr<SharedSpan> pageable = reg2->Resolve("p", 0, 8, "x");
  ASSERT_TRUE(pageable.ok());
  EXPECT_EQ(pageable->where.kind, MemoryKind::kHostHeap);
  EXPECT_FALSE(pageable->where.page_locked());
}

TEST(SharedMemoryRegistry, RangesOutsideTheRegionAreRefusedByName) {
  ShmObject obj(4096);
  auto reg = MakeRegistry();
  ASSERT_TRUE(reg->Register("r", obj.key(), 0, 1000).ok());
  for (auto [offset, bytes] : {std::pair<int64_t, int64_t>{0, 1001}, {990, 11}, {-1, 4},
                               {4, -1}, {INT64_MAX, 2}}) {
    absl::StatusOr<SharedSpan> span = reg->Resolve("r", offset, bytes, "input 'x'");
    EXPECT_TRUE(absl::IsInvalidArgument(span.status())) << offset << " " << bytes;
    EXPECT_THAT(span.status().message(), HasSubstr("input 'x'"));
  }
  EXPECT_TRUE(reg->Resolve("r", 990, 10, "x").ok());
  absl::StatusOr<SharedSpan> missing = reg->Resolve("nope", 0, 1, "output 'y'");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(missing.status().message(), HasSubstr("\"nope\" is not registered"));
}

TEST(SharedMemoryRegistry, RegionsServeOnlyTheirOwnerAndHideFromOthers) {
  ShmObject obj(4096);
  auto reg = MakeRegistry();
  const RegionUser alice{"alice", false}, bob{"bob", false}, ops{"ops", true};
  ASSERT_TRUE(reg->Register("a", obj.key(), 0, 1024, "alice").ok());
  ASSERT_TRUE(reg->Register("b", obj.key(), 1024, 1024, "bob").ok());
  EXPECT_EQ((*reg->Status("a", RegionType::kSystem, alice))[0].owner, "alice");
  EXPECT_TRUE(reg->Resolve("a", 0, 8, "x", alice).ok());

  // To another principal, alice's region is answered as one never registered.
  auto unknown = reg->Resolve("never", 0, 8, "x", bob);
  auto foreign = reg->Resolve("a", 0, 8, "x", bob);
  EXPECT_TRUE(absl::IsNotFound(foreign.status()));
  EXPECT_EQ(foreign.status().message(),
            absl::StrReplaceAll(unknown.status().message(), {{"never", "a"}}));
  absl::Status status_foreign = reg->Status("a", RegionType::kSystem, bob).status();
  absl::Status status_unknown = reg->Status("never", RegionType::kSystem, bob).status();
  EXPECT_TRUE(absl::IsNotFound(status_foreign));
  EXPECT_EQ(status_foreign.message(),
            absl::StrReplaceAll(status_unknown.message(), {{"never", "a"}}));
  EXPECT_THAT(status_foreign.message(), HasSubstr("name: "));
  EXPECT_TRUE(absl::IsNotFound(reg->Unregister("a", RegionType::kSystem, bob)));
  auto listed = reg->Status("", RegionType::kSystem, bob);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, "b");
  // Names are one namespace: taken is taken.
  EXPECT_TRUE(absl::IsAlreadyExists(reg->Register("a", obj.key(), 0, 16, "bob")));

  // Operators see and unregister every region but read none of another's.
  EXPECT_EQ(reg->Status("", RegionType::kSystem, ops)->size(), 2u);
  EXPECT_TRUE(absl::IsPermissionDenied(reg->Resolve("a", 0, 8, "x", ops).status()));
  // Unregister of every region releases only the caller's own.
  EXPECT_TRUE(reg->Unregister("", RegionType::kSystem, bob).ok());
  EXPECT_TRUE(reg->Unregister("", RegionType::kSystem, ops).ok());
  EXPECT_TRUE(reg->Resolve("a", 0, 8, "x", alice).ok());
  EXPECT_TRUE(absl::IsNotFound(reg->Resolve("b", 0, 8, "x", bob).status()));
  EXPECT_TRUE(reg->Unregister("a", RegionType::kSystem, ops).ok());
  EXPECT_TRUE(absl::IsNotFound(reg->Resolve("a", 0, 8, "x", alice).status()));
}

TEST(SharedMemoryRegistry, RegistrationChecksKeyNameAndSize) {
  ShmObject obj(4096);
  auto reg = MakeRegistry(2);
  EXPECT_TRUE(absl::IsNotFound(reg->Register("a", "/conv1d_no_such_object", 0, 16)));
  EXPECT_TRUE(absl::IsInvalidArgument(reg->Register("a", obj.key(), 4000, 200)));
  EXPECT_TRUE(absl::IsInvalidArgument(reg->Register("a", obj.key(), 0, 0)));
  EXPECT_TRUE(absl::IsInvalidArgument(reg->Register("a", "/a/b", 0, 16)));
  EXPECT_TRUE(absl::IsInvalidArgument(reg->Register("", obj.key(), 0, 16)));
  ASSERT_TRUE(reg->Register("a", obj.key(), 0, 16).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(reg->Register("a", obj.key(), 0, 16)));
  ASSERT_TRUE(reg->Register("b", obj.key(), 16, 16).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(reg->Register("c", obj.key(), 0, 16)));
}

TEST(SharedMemoryRegistry, ARegionInUseCannotBeUnregistered) {
  ShmObject obj(4096);
  auto reg = MakeRegistry();
  ASSERT_TRUE(reg->Register("r", obj.key(), 0, 4096).ok());
  ASSERT_TRUE(reg->Register("idle", obj.key(), 0, 64).ok());
  absl::StatusOr<SharedSpan> span = reg->Resolve("r", 0, 64, "input 'x'");
  ASSERT_TRUE(span.ok());
  absl::Status busy = reg->Unregister("r");
  EXPECT_TRUE(absl::IsFailedPrecondition(busy)) << busy;
  EXPECT_THAT(busy.message(), HasSubstr("\"r\" is in use by 1 in-flight request"));
  // Unregistering everything releases the idle one and names the busy one.
  absl::Status all = reg->Unregister("");
  EXPECT_TRUE(absl::IsFailedPrecondition(all));
  EXPECT_THAT(all.message(), HasSubstr("\"r\""));
  EXPECT_TRUE(absl::IsNotFound(reg->Status("idle").status()));
  span = absl::UnknownError("released");
  EXPECT_TRUE(reg->Unregister("r").ok());
  EXPECT_TRUE(absl::IsNotFound(reg->Unregister("r")));
}

TEST(SharedMemoryRegistry, SpansOutliveUnregistrationOfTheirRegistry) {
  ShmObject obj(4096);
  absl::StatusOr<SharedSpan> span;
  {
    auto reg = MakeRegistry();
    ASSERT_TRUE(reg->Register("r", obj.key(), 0, 4096).ok());
    span = reg->Resolve("r", 8, 8, "x");
    ASSERT_TRUE(span.ok());
  }
  std::memcpy(obj.data() + 8, "12345678", 8);
  EXPECT_EQ(std::memcmp(span->data.get(), "12345678", 8), 0);
}

TEST(SharedMemoryRegistry, ShrunkObjectIsRefusedNotTouched) {
  ShmObject obj(8192);
  auto reg = MakeRegistry();
  ASSERT_TRUE(reg->Register("r", obj.key(), 0, 8192).ok());
  obj.Resize(100);
  absl::StatusOr<SharedSpan> span = reg->Resolve("r", 0, 16, "input 'x'");
  EXPECT_TRUE(absl::IsFailedPrecondition(span.status())) << span.status();
  EXPECT_THAT(span.status().message(), HasSubstr("is now 100 bytes"));
  obj.Resize(8192);
  EXPECT_TRUE(reg->Resolve("r", 0, 16, "input 'x'").ok());
}

TEST(SharedMemoryRegistry, UnlinkedObjectKeepsServingItsRegion) {
  ShmObject obj(4096);
  auto reg = MakeRegistry();
  ASSERT_TRUE(reg->Register("r", obj.key(), 0, 4096).ok());
  obj.Unlink();
  std::memcpy(obj.data(), "abc", 3);
  absl::StatusOr<SharedSpan> span = reg->Resolve("r", 0, 3, "x");
  ASSERT_TRUE(span.ok()) << span.status();
  EXPECT_EQ(std::memcmp(span->data.get(), "abc", 3), 0);
  // A new registration of the vanished key is refused.
  EXPECT_TRUE(absl::IsNotFound(reg->Register("again", obj.key(), 0, 16)));
}

}  // namespace
}  // namespace conv1d
