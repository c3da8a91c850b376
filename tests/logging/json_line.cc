#include "tests/logging/json_line.h"

#include <regex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"

namespace conv1d::testing {

absl::StatusOr<google::protobuf::Struct> ParseJsonLine(std::string_view line) {
  for (size_t i = 0; i < line.size(); ++i) {
    if (static_cast<unsigned char>(line[i]) < 0x20) {
      return absl::InvalidArgumentError(
          absl::StrCat("raw control byte ", static_cast<int>(line[i]), " at ", i));
    }
  }
  google::protobuf::Struct object;
  const auto status = google::protobuf::util::JsonStringToMessage(
      std::string(line), &object);
  if (!status.ok()) return absl::InvalidArgumentError(status.ToString());
  return object;
}

std::string StringField(const google::protobuf::Struct& object, const std::string& key) {
  const auto it = object.fields().find(key);
  if (it == object.fields().end() || !it->second.has_string_value()) return "";
  return it->second.string_value();
}

double NumberField(const google::protobuf::Struct& object, const std::string& key) {
  const auto it = object.fields().find(key);
  if (it == object.fields().end() || !it->second.has_number_value()) return -1;
  return it->second.number_value();
}

std::vector<std::string> Lines(std::string_view text) {
  return absl::StrSplit(absl::string_view(text.data(), text.size()), '\n',
                        absl::SkipEmpty());
}

bool IsRfc3339MicrosUtc(const std::string& ts) {
  static const std::regex kTs(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)");
  return std::regex_match(ts, kTs);
}

}  // namespace conv1d::testing
