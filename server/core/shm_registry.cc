#include "server/core/shm_registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace conv1d {
namespace {

constexpr size_t kMaxNameBytes = 256;
// shm_open names: one leading '/' (optional), then up to NAME_MAX bytes
// without further '/'.
constexpr size_t kMaxKeyBytes = 255;

absl::Status CheckName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("name: the region name is empty");
  if (name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: ", name.size(), " bytes, at most ", kMaxNameBytes));
  }
  return absl::OkStatus();
}

absl::Status CheckKey(absl::string_view key) {
  absl::string_view rest = key;
  if (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
  if (rest.empty() || rest.size() > kMaxKeyBytes ||
      rest.find('/') != absl::string_view::npos ||
      rest.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key: \"", key, "\" is not a POSIX shared-memory name (\"/name\", 1..",
        kMaxKeyBytes, " bytes, no other '/')"));
  }
  return absl::OkStatus();
}

}  // namespace

// One mapped region. Destroyed (unmapped, closed) when the registry and
// every span have let go of it.
struct SharedMemoryRegistry::Region {
  SharedRegionInfo info;
  // Leases of in-flight requests; taken under the registry's mutex.
  std::atomic<int64_t> leases{0};
  int fd = -1;
  void* map_base = MAP_FAILED;
  size_t map_bytes = 0;
  char* data = nullptr;  // map_base + the offset's distance from its page

  std::shared_ptr<HostMemoryPinner> pinner;  // set when the mapping is pinned
  // Device regions: the opened allocation, closed by `importer`.
  std::shared_ptr<DeviceMemoryImporter> importer;
  void* device_address = nullptr;

  ~Region() {
    if (pinner != nullptr) pinner->Unpin(map_base);
    if (map_base != MAP_FAILED) munmap(map_base, map_bytes);
    if (fd >= 0) close(fd);
    if (importer != nullptr) importer->Close(device_address, info.device_id);
  }

  // FAILED_PRECONDITION when the object no longer backs the whole region.
  absl::Status CheckBacked() const {
    if (info.type == RegionType::kDevice) return absl::OkStatus();
    struct stat st;
    if (fstat(fd, &st) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "region \"", info.name, "\": cannot stat \"", info.key, "\": ",
          std::strerror(errno)));
    }
    if (st.st_size < info.offset + info.byte_size) {
      return absl::FailedPreconditionError(absl::StrCat(
          "region \"", info.name, "\": shared-memory object \"", info.key, "\" is now ",
          st.st_size, " bytes, smaller than the registered offset + byte_size (",
          info.offset + info.byte_size, "); register it again"));
    }
    return absl::OkStatus();
  }
};

absl::StatusOr<std::unique_ptr<SharedMemoryRegistry>> SharedMemoryRegistry::Create(
    const SharedMemoryRegistryOptions& options) {
  if (options.max_regions < 1 || options.max_regions > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shm_max_regions is ", options.max_regions, ", expected 1..65536"));
  }
  return std::unique_ptr<SharedMemoryRegistry>(new SharedMemoryRegistry(options));
}

SharedMemoryRegistry::~SharedMemoryRegistry() = default;

absl::Status SharedMemoryRegistry::Register(absl::string_view name, absl::string_view key,
                                            int64_t offset, int64_t byte_size,
                                            absl::string_view owner) {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  if (offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("offset: ", offset, " is negative"));
  }
  int64_t end = 0;
  if (byte_size <= 0 || __builtin_add_overflow(offset, byte_size, &end)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "byte_size: ", byte_size, ", expected >= 1 with offset + byte_size within int64"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = CheckRoomFor(name); !s.ok()) return s;
  }

  auto region = std::make_shared<Region>();
  region->info.name = std::string(name);
  region->info.owner = std::string(owner);
  region->info.key = std::string(key);
  region->info.offset = offset;
  region->info.byte_size = byte_size;
  region->fd = shm_open(region->info.key.c_str(), O_RDWR, 0);
  if (region->fd < 0) {
    const int err = errno;
    const std::string what = absl::StrCat("region \"", name, "\": cannot open key \"",
                                          key, "\": ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(what);
    if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(what);
    return absl::InvalidArgumentError(what);
  }
  struct stat st;
  if (fstat(region->fd, &st) != 0) {
    return absl::InternalError(absl::StrCat("region \"", name, "\": cannot stat key \"",
                                            key, "\": ", std::strerror(errno)));
  }
  if (st.st_size < end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region \"", name, "\": offset ", offset, " + byte_size ", byte_size, " = ", end,
        " bytes, but shared-memory object \"", key, "\" has ", st.st_size, " bytes"));
  }
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t map_offset = offset - offset % page;
  region->map_bytes = static_cast<size_t>(end - map_offset);
  region->map_base = mmap(nullptr, region->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                          region->fd, static_cast<off_t>(map_offset));
  if (region->map_base == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "region \"", name, "\": cannot map ", byte_size, " bytes of \"", key,
        "\": ", std::strerror(errno)));
  }
  region->data = static_cast<char*>(region->map_base) + (offset - map_offset);
  if (options_.pinner != nullptr) {
    absl::Status pinned =
        options_.pinner->Pin(region->map_base, static_cast<int64_t>(region->map_bytes));
    if (pinned.ok()) {
      region->pinner = options_.pinner;
      region->info.page_locked = true;
    } else {
      region->info.pin_error = std::string(pinned.message());
    }
  }
  return Insert(std::move(region));
}

absl::Status SharedMemoryRegistry::RegisterDevice(absl::string_view name,
                                                  absl::string_view raw_handle,
                                                  int32_t device_id, int64_t byte_size,
                                                  absl::string_view owner) {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  if (options_.importer == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "region \"", name, "\": this server's backend cannot use device memory"));
  }
  if (byte_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("region \"", name, "\": byte_size is ", byte_size, ", expected >= 1"));
  }
  const int64_t handle_bytes = options_.importer->handle_bytes();
  if (static_cast<int64_t>(raw_handle.size()) != handle_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region \"", name, "\": raw_handle has ", raw_handle.size(), " bytes, expected ",
        handle_bytes, " (an IPC memory handle)"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = CheckRoomFor(name); !s.ok()) return s;
  }
  absl::StatusOr<ImportedDeviceMemory> opened = options_.importer->Open(raw_handle, device_id);
  if (!opened.ok()) {
    return absl::Status(opened.status().code(),
                        absl::StrCat("region \"", name, "\": ", opened.status().message()));
  }
  auto region = std::make_shared<Region>();
  region->info.type = RegionType::kDevice;
  region->info.name = std::string(name);
  region->info.owner = std::string(owner);
  region->info.byte_size = byte_size;
  region->info.raw_handle = std::string(raw_handle);
  region->info.device_id = device_id;
  region->importer = options_.importer;  // closes it from here on
  region->device_address = opened->address;
  if (opened->bytes < byte_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region \"", name, "\": byte_size ", byte_size, " is more than the ", opened->bytes,
        " bytes of the exported device allocation"));
  }
  return Insert(std::move(region));
}

absl::Status SharedMemoryRegistry::CheckRoomFor(absl::string_view name) const {
  if (regions_.count(name) != 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        "region \"", name, "\" is already registered; unregister it first"));
  }
  if (static_cast<int64_t>(regions_.size()) >= options_.max_regions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "region \"", name, "\": ", regions_.size(),
        " regions are registered, the server's limit"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::Insert(std::shared_ptr<Region> region) {
  absl::MutexLock lock(&mu_);
  // Checked again: another Register of the same name may have won meanwhile
  // (the loser's region is released outside the lock by its caller).
  if (absl::Status s = CheckRoomFor(region->info.name); !s.ok()) return s;
  region->info.id = next_id_++;
  const std::string key = region->info.name;
  regions_.emplace(key, std::move(region));
  return absl::OkStatus();
}

namespace {

const char* TypeName(RegionType type) {
  return type == RegionType::kDevice ? "CUDA" : "system";
}

// The one answer for a region that is not there, or not `user`'s to reach.
absl::Status NotRegistered(RegionType type, absl::string_view name) {
  return absl::NotFoundError(absl::StrCat("name: ", TypeName(type), " shared-memory region \"",
                                          name, "\" is not registered"));
}

bool Owns(const RegionUser& user, const SharedRegionInfo& info) {
  return info.owner == user.principal;
}

// Status and Unregister by name (see Ownership in the header).
bool Reaches(const RegionUser& user, const SharedRegionInfo& info) {
  return user.all_regions || Owns(user, info);
}

}  // namespace

absl::Status SharedMemoryRegistry::Unregister(absl::string_view name, RegionType type,
                                              const RegionUser& user) {
  // Regions erased here are released after the lock (declared before it,
  // destroyed after it): unpinning or closing device memory may take a while.
  std::vector<std::shared_ptr<Region>> released;
  absl::MutexLock lock(&mu_);
  // Leases are only taken under mu_, so a region without any cannot gain
  // one while it is erased.
  if (!name.empty()) {
    auto it = regions_.find(name);
    if (it == regions_.end() || it->second->info.type != type ||
        !Reaches(user, it->second->info)) {
      return NotRegistered(type, name);
    }
    const int64_t users = it->second->leases.load();
    if (users > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "region \"", name, "\" is in use by ", users,
          " in-flight request(s); unregister it after they finish"));
    }
    released.push_back(std::move(it->second));
    regions_.erase(it);
    return absl::OkStatus();
  }
  std::vector<std::string> busy;
  for (auto it = regions_.begin(); it != regions_.end();) {
    if (it->second->info.type != type || !Owns(user, it->second->info)) {
      ++it;
    } else if (it->second->leases.load() > 0) {
      busy.push_back(absl::StrCat("\"", it->first, "\""));
      ++it;
    } else {
      released.push_back(std::move(it->second));
      it = regions_.erase(it);
    }
  }
  if (busy.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "regions ", absl::StrJoin(busy, ", "),
      " are in use by in-flight requests and stay registered; the others were "
      "unregistered"));
}

absl::StatusOr<std::vector<SharedRegionInfo>> SharedMemoryRegistry::Status(
    absl::string_view name, RegionType type, const RegionUser& user) const {
  absl::MutexLock lock(&mu_);
  std::vector<SharedRegionInfo> out;
  for (const auto& [region_name, region] : regions_) {
    if (region->info.type != type || !Reaches(user, region->info)) continue;
    if (!name.empty() && region_name != name) continue;
    out.push_back(region->info);
    out.back().in_use = region->leases.load();
  }
  if (!name.empty() && out.empty()) return NotRegistered(type, name);
  return out;
}

absl::StatusOr<SharedSpan> SharedMemoryRegistry::Resolve(absl::string_view name,
                                                         int64_t offset, int64_t bytes,
                                                         absl::string_view what,
                                                         const RegionUser& user) const {
  std::shared_ptr<Region> region;
  SharedSpan span;
  {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(name);
    if (it != regions_.end() && !Owns(user, it->second->info) && user.all_regions) {
      return absl::PermissionDeniedError(absl::StrCat(
          what, ": shared-memory region \"", name, "\" belongs to another principal; '",
          user.principal, "' may list and unregister it, not read or write it"));
    }
    if (it == regions_.end() || !Owns(user, it->second->info)) {
      return absl::NotFoundError(absl::StrCat(what, ": shared-memory region \"", name,
                                              "\" is not registered"));
    }
    region = it->second;
    // Released with the span on any error below.
    region->leases.fetch_add(1);
    span.lease = std::shared_ptr<void>(region.get(), [region](void*) {
      region->leases.fetch_sub(1);
    });
  }
  int64_t end = 0;
  if (offset < 0 || bytes < 0 || __builtin_add_overflow(offset, bytes, &end) ||
      end > region->info.byte_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", bytes, " bytes at offset ", offset, " do not fit in shared-memory region \"",
        name, "\" of ", region->info.byte_size, " bytes"));
  }
  if (absl::Status s = region->CheckBacked(); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": ", s.message()));
  }
  span.bytes = bytes;
  span.where.region = region->info.id;
  span.where.offset = offset;
  char* data = nullptr;
  if (region->info.type == RegionType::kDevice) {
    span.where.kind = MemoryKind::kSharedDevice;
    span.where.device = region->info.device_id;
    data = static_cast<char*>(region->device_address) + offset;
  } else {
    // Pageable regions are staged like heap memory (see the header).
    span.where.kind =
        region->info.page_locked ? MemoryKind::kSharedHost : MemoryKind::kHostHeap;
    data = region->data + offset;
  }
  // Aliases the region: the span keeps the mapping alive.
  span.data = std::shared_ptr<void>(std::move(region), data);
  return span;
}

}  // namespace conv1d
