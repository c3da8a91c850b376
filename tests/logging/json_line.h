// Test helper: strict parsing of one JSON log line into a protobuf Struct
// (protobuf's JSON parser checks the syntax and UTF-8; this adds the rule it
// lets through, that a string holds no raw control character), and field
// access for the assertions.
//
// Used by tests/logging and the binary's logging test in tests/e2e.
// Pure functions; safe from any thread.
#ifndef CONV1D_TESTS_LOGGING_JSON_LINE_H_
#define CONV1D_TESTS_LOGGING_JSON_LINE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/struct.pb.h"

namespace conv1d::testing {

// One JSON object, nothing before or after it, no byte below 0x20.
absl::StatusOr<google::protobuf::Struct> ParseJsonLine(std::string_view line);

// The field as a string ("" when absent or not a string) or number (-1).
std::string StringField(const google::protobuf::Struct& object, const std::string& key);
double NumberField(const google::protobuf::Struct& object, const std::string& key);

// The non-empty lines of `text`.
std::vector<std::string> Lines(std::string_view text);

// RFC 3339 UTC with exactly six fraction digits: 2024-05-01T12:34:56.123456Z.
bool IsRfc3339MicrosUtc(const std::string& ts);

}  // namespace conv1d::testing

#endif  // CONV1D_TESTS_LOGGING_JSON_LINE_H_
