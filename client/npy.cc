#include "client/npy.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace conv1d {

namespace {
constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

const char* Descr(DType t) {
  switch (t) {
    case DType::kF32: return "<f4";
    case DType::kF16: return "<f2";
    case DType::kBF16: return "<u2";
  }
  return "?";
}

// Value of `key` in the header dict: the text after "'key':" up to the next
// top-level comma (shape tuples contain commas inside parentheses).
absl::StatusOr<std::string> DictValue(absl::string_view header, absl::string_view key) {
  const std::string needle = absl::StrCat("'", key, "'");
  size_t pos = header.find(needle);
  if (pos == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("npy header lacks '", key, "'"));
  }
  pos = header.find(':', pos + needle.size());
  if (pos == absl::string_view::npos) return absl::InvalidArgumentError("bad npy header");
  ++pos;
  int depth = 0;
  size_t end = pos;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if ((c == ',' && depth == 0) || c == '}') break;
  }
  return std::string(absl::StripAsciiWhitespace(header.substr(pos, end - pos)));
}
}  // namespace

std::string SerializeNpy(const HostTensor& t) {
  std::string shape = absl::StrJoin(t.shape, ", ");
  if (t.shape.size() == 1) shape += ",";
  std::string header = absl::StrCat("{'descr': '", Descr(t.dtype),
                                    "', 'fortran_order': False, 'shape': (",
                                    shape, "), }");
  // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
  const size_t unpadded = kMagicLen + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kMagic, kMagicLen);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>((header.size() >> 8) & 0xff));
  out += header;
  out += t.data;
  return out;
}

absl::StatusOr<HostTensor> ParseNpy(absl::string_view bytes) {
  if (bytes.size() < 10 || bytes.substr(0, kMagicLen) != absl::string_view(kMagic, kMagicLen)) {
    return absl::InvalidArgumentError("not a .npy file (bad magic)");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, offset;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) |
                 (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return absl::InvalidArgumentError("truncated .npy header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) {
      header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    }
    offset = 12;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unsupported .npy version ", major));
  }
  if (bytes.size() < offset + header_len) {
    return absl::InvalidArgumentError("truncated .npy header");
  }
  const absl::string_view header = bytes.substr(offset, header_len);
  HostTensor t;
  absl::StatusOr<std::string> descr = DictValue(header, "descr");
  if (!descr.ok()) return descr.status();
  const std::string d(absl::StripSuffix(absl::StripPrefix(*descr, "'"), "'"));
  if (d == "<f4") {
    t.dtype = DType::kF32;
  } else if (d == "<f2") {
    t.dtype = DType::kF16;
  } else if (d == "<u2" || d == "<i2") {
    t.dtype = DType::kBF16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported .npy dtype ", d, " (want <f4, <f2, or <u2 holding bf16 bits)"));
  }
  absl::StatusOr<std::string> fortran = DictValue(header, "fortran_order");
  if (!fortran.ok()) return fortran.status();
  if (*fortran != "False") {
    return absl::InvalidArgumentError("Fortran-order .npy arrays are not supported");
  }
  absl::StatusOr<std::string> shape = DictValue(header, "shape");
  if (!shape.ok()) return shape.status();
  absl::string_view dims = absl::StripSuffix(absl::StripPrefix(*shape, "("), ")");
  for (absl::string_view part : absl::StrSplit(dims, ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad .npy shape ", *shape));
    }
    t.shape.push_back(v);
  }
  const size_t want = static_cast<size_t>(t.num_elements() * DTypeSize(t.dtype));
  const absl::string_view payload = bytes.substr(offset + header_len);
  if (payload.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        ".npy payload has ", payload.size(), " bytes, shape needs ", want));
  }
  t.data = std::string(payload);
  return t;
}

absl::Status WriteNpyFile(const std::string& path, const HostTensor& t) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path, " for writing"));
  const std::string bytes = SerializeNpy(t);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) return absl::InternalError(absl::StrCat("write to ", path, " failed"));
  return absl::OkStatus();
}

absl::StatusOr<HostTensor> ReadNpyFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << f.rdbuf();
  absl::StatusOr<HostTensor> t = ParseNpy(ss.str());
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  }
  return t;
}

}  // namespace conv1d
