#include "server/frontend/request_log.h"

#include <random>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "conv1d/v1/conv1d.pb.h"
#include "google/protobuf/descriptor.h"
#include "spdlog/spdlog.h"

namespace conv1d {
namespace {

// Shapes are printed up to this rank; a longer (invalid) shape ends in "...".
constexpr int kMaxDimsShown = 8;
// String fields (weight set names) are cut to this many bytes.
constexpr size_t kMaxStringBytes = 64;

bool IsIdByte(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
         c == ':' || c == '/' || c == '+' || c == '=' || c == '@' || c == '-';
}

void AppendTensor(const std::string& name, const v1::Tensor& t, std::string* out) {
  std::string dtype = v1::DType_Name(t.dtype());
  if (dtype.empty()) dtype = absl::StrCat("dtype(", static_cast<int>(t.dtype()), ")");
  absl::StrAppend(out, out->empty() ? "" : " ", name, "=", absl::AsciiStrToLower(dtype),
                  "[");
  for (int i = 0; i < t.shape_size() && i < kMaxDimsShown; ++i) {
    absl::StrAppend(out, i > 0 ? "," : "", t.shape(i));
  }
  if (t.shape_size() > kMaxDimsShown) absl::StrAppend(out, ",...");
  absl::StrAppend(out, "]");
}

void Describe(const google::protobuf::Message& message, std::string* out) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);  // set fields, by number
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->is_repeated()) continue;
    if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      const google::protobuf::Message& sub = reflection->GetMessage(message, field);
      const v1::Tensor* tensor = google::protobuf::DynamicCastToGenerated<v1::Tensor>(&sub);
      if (tensor != nullptr) {
        AppendTensor(field->name(), *tensor, out);
      } else {
        Describe(sub, out);
      }
    } else if (field->type() == google::protobuf::FieldDescriptor::TYPE_STRING) {
      // Names chosen by the client: cut and escaped, as they are free text.
      std::string scratch;
      const std::string& value = reflection->GetStringReference(message, field, &scratch);
      absl::StrAppend(out, out->empty() ? "" : " ", field->name(), "=\"",
                      absl::CHexEscape(value.substr(0, kMaxStringBytes)),
                      value.size() > kMaxStringBytes ? "...\"" : "\"");
    }
  }
}

}  // namespace

std::string SanitizeRequestId(std::string_view raw) {
  std::string id(raw.substr(0, kMaxRequestIdBytes));
  for (char& c : id) {
    if (!IsIdByte(c)) c = '_';
  }
  return id;
}

RequestIds::RequestIds() {
  // Distinguishes this process's ids from those of its restarts and of
  // other replicas behind the same load balancer.
  std::random_device random;
  prefix_ = absl::StrFormat("%08x", static_cast<uint32_t>(random()));
}

std::string RequestIds::Next(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find(kRequestIdKey);
  if (it != metadata.end() && !it->second.empty()) {
    return SanitizeRequestId(std::string_view(it->second.data(), it->second.size()));
  }
  return absl::StrCat(prefix_, "-", next_.fetch_add(1, std::memory_order_relaxed));
}

std::string DescribeTensors(const google::protobuf::Message& request) {
  std::string out;
  Describe(request, &out);
  return out;
}

void LogFinishedCall(const FinishedCall& call, grpc::ServerContextBase* context,
                     AccessLog* access_log) {
  spdlog::logger* logger = spdlog::default_logger_raw();
  const bool debug = logger->should_log(spdlog::level::debug);
  if (!debug && access_log == nullptr) return;

  const std::string peer = context->peer();
  const std::string code = absl::StatusCodeToString(call.status.code());
  const int64_t latency_us = absl::ToInt64Microseconds(call.latency);
  if (debug) {
    const std::string tensors =
        call.request != nullptr ? DescribeTensors(*call.request) : "(did not parse)";
    // The error text may quote client-chosen names: escaped to one line.
    const std::string error =
        call.status.ok() ? ""
                         : absl::StrCat(" error=\"", absl::CHexEscape(call.status.message()),
                                        "\"");
    logger->debug(
        "{} finished: request_id={} peer={} code={} latency_us={} request_bytes={} "
        "response_bytes={} tensors: {}{}",
        call.method, call.request_id, peer, code, latency_us, call.request_bytes,
        call.response_bytes, tensors, error);
  }
  if (access_log != nullptr) {
    AccessRecord record;
    record.peer = peer;
    record.method = call.method;
    record.request_id = call.request_id;
    record.code = call.status.code();
    record.latency_us = latency_us;
    record.request_bytes = call.request_bytes;
    record.response_bytes = call.response_bytes;
    record.principal = call.principal;
    record.action = call.audit_action;
    record.weights = call.audit_weights;
    access_log->Record(record);
  }
}

}  // namespace conv1d
