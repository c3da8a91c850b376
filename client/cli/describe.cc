#include "client/cli/describe.h"

#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace conv1d {
namespace {

namespace refl = grpc::reflection::v1alpha;
namespace gpb = google::protobuf;

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

// One reflection stream; file descriptors it returns are added to `pool_`
// (dependencies first, fetched by name when missing).
class ReflectionSession {
 public:
  ReflectionSession(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout)
      : stub_(refl::ServerReflection::NewStub(std::move(channel))) {
    context_.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    stream_ = stub_->ServerReflectionInfo(&context_);
  }

  ~ReflectionSession() {
    stream_->WritesDone();
    refl::ServerReflectionResponse drain;
    while (stream_->Read(&drain)) {
    }
    stream_->Finish().IgnoreError();
  }

  absl::StatusOr<std::vector<std::string>> ListServices() {
    refl::ServerReflectionRequest req;
    req.set_list_services("");
    absl::StatusOr<refl::ServerReflectionResponse> r = Ask(req);
    if (!r.ok()) return r.status();
    std::vector<std::string> out;
    for (const auto& s : r->list_services_response().service()) out.push_back(s.name());
    return out;
  }

  // Loads the file that defines `symbol` (and what it imports) into the pool.
  absl::Status LoadSymbol(const std::string& symbol) {
    if (pool_.FindServiceByName(symbol) != nullptr ||
        pool_.FindMessageTypeByName(symbol) != nullptr ||
        pool_.FindMethodByName(symbol) != nullptr ||
        pool_.FindEnumTypeByName(symbol) != nullptr) {
      return absl::OkStatus();
    }
    refl::ServerReflectionRequest req;
    req.set_file_containing_symbol(symbol);
    absl::Status s = AddFiles(req);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("'", symbol, "': ", s.message()));
    return s;
  }

  const gpb::DescriptorPool& pool() const { return pool_; }

 private:
  absl::StatusOr<refl::ServerReflectionResponse> Ask(const refl::ServerReflectionRequest& req) {
    refl::ServerReflectionResponse resp;
    if (!stream_->Write(req) || !stream_->Read(&resp)) {
      return FromGrpc(stream_->Finish(), "server reflection");
    }
    if (resp.has_error_response()) {
      return absl::Status(static_cast<absl::StatusCode>(resp.error_response().error_code()),
                          absl::StrCat("server reflection: ",
                                       resp.error_response().error_message()));
    }
    return resp;
  }

  absl::Status AddFiles(const refl::ServerReflectionRequest& req) {
    absl::StatusOr<refl::ServerReflectionResponse> r = Ask(req);
    if (!r.ok()) return r.status();
    for (const std::string& bytes : r->file_descriptor_response().file_descriptor_proto()) {
      gpb::FileDescriptorProto f;
      if (!f.ParseFromString(bytes)) {
        return absl::DataLossError("server reflection: unreadable file descriptor");
      }
      pending_[f.name()] = std::move(f);
    }
    // Build in dependency order, asking for imports the server did not send.
    while (!pending_.empty()) {
      const std::string name = pending_.begin()->first;
      if (absl::Status s = Build(name, 0); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status Build(const std::string& name, int depth) {
    if (pool_.FindFileByName(name) != nullptr) {
      pending_.erase(name);
      return absl::OkStatus();
    }
    if (depth > 64) return absl::InternalError("server reflection: import cycle");
    auto it = pending_.find(name);
    if (it == pending_.end()) {
      refl::ServerReflectionRequest req;
      req.set_file_by_filename(name);
      absl::StatusOr<refl::ServerReflectionResponse> r = Ask(req);
      if (!r.ok()) return r.status();
      for (const std::string& bytes : r->file_descriptor_response().file_descriptor_proto()) {
        gpb::FileDescriptorProto f;
        if (f.ParseFromString(bytes) && pool_.FindFileByName(f.name()) == nullptr) {
          pending_[f.name()] = std::move(f);
        }
      }
      it = pending_.find(name);
      if (it == pending_.end()) {
        return absl::NotFoundError(absl::StrCat("server reflection: no file '", name, "'"));
      }
    }
    const gpb::FileDescriptorProto file = it->second;
    for (const std::string& dep : file.dependency()) {
      if (absl::Status s = Build(dep, depth + 1); !s.ok()) return s;
    }
    if (pool_.BuildFile(file) == nullptr) {
      return absl::DataLossError(absl::StrCat("server reflection: cannot build '", name, "'"));
    }
    pending_.erase(name);
    return absl::OkStatus();
  }

  std::unique_ptr<refl::ServerReflection::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<refl::ServerReflectionRequest,
                                           refl::ServerReflectionResponse>>
      stream_;
  gpb::DescriptorPool pool_;
  std::map<std::string, gpb::FileDescriptorProto> pending_;
};

std::string FieldType(const gpb::FieldDescriptor& f) {
  std::string t;
  if (f.is_map()) {
    return absl::StrCat("map<", FieldType(*f.message_type()->map_key()), ", ",
                        FieldType(*f.message_type()->map_value()), ">");
  }
  if (f.message_type() != nullptr) {
    t = f.message_type()->full_name();
  } else if (f.enum_type() != nullptr) {
    t = f.enum_type()->full_name();
  } else {
    t = f.type_name();
  }
  return f.is_repeated() ? absl::StrCat("repeated ", t) : t;
}

void DescribeMessage(const gpb::Descriptor& m, std::set<std::string>* done, std::string* out) {
  if (!done->insert(m.full_name()).second) return;
  absl::StrAppend(out, "message ", m.full_name(), " {\n");
  std::vector<const gpb::Descriptor*> nested;
  for (int i = 0; i < m.field_count(); ++i) {
    const gpb::FieldDescriptor& f = *m.field(i);
    const gpb::OneofDescriptor* oneof = f.real_containing_oneof();
    absl::StrAppend(out, "  ", FieldType(f), " ", f.name(), " = ", f.number(), ";",
                    oneof != nullptr ? absl::StrCat("  // oneof ", oneof->name()) : "",
                    f.has_presence() && oneof == nullptr && f.message_type() == nullptr
                        ? "  // optional"
                        : "",
                    "\n");
    if (f.message_type() != nullptr && !f.is_map()) nested.push_back(f.message_type());
  }
  absl::StrAppend(out, "}\n");
  for (const gpb::Descriptor* n : nested) DescribeMessage(*n, done, out);
}

void DescribeEnumsOf(const gpb::Descriptor& m, std::set<std::string>* done, std::string* out) {
  if (!done->insert(absl::StrCat("enums:", m.full_name())).second) return;
  for (int i = 0; i < m.field_count(); ++i) {
    const gpb::FieldDescriptor& f = *m.field(i);
    if (f.enum_type() != nullptr && done->insert(f.enum_type()->full_name()).second) {
      const gpb::EnumDescriptor& e = *f.enum_type();
      std::vector<std::string> values;
      for (int v = 0; v < e.value_count(); ++v) {
        values.push_back(absl::StrCat(e.value(v)->name(), " = ", e.value(v)->number()));
      }
      absl::StrAppend(out, "enum ", e.full_name(), " { ", absl::StrJoin(values, "; "), " }\n");
    }
    if (f.message_type() != nullptr) DescribeEnumsOf(*f.message_type(), done, out);
  }
}

void DescribeService(const gpb::ServiceDescriptor& s, std::string* out) {
  absl::StrAppend(out, "service ", s.full_name(), " {\n");
  for (int i = 0; i < s.method_count(); ++i) {
    const gpb::MethodDescriptor& m = *s.method(i);
    absl::StrAppend(out, "  rpc ", m.name(), "(", m.client_streaming() ? "stream " : "",
                    m.input_type()->full_name(), ") returns (",
                    m.server_streaming() ? "stream " : "", m.output_type()->full_name(),
                    ");\n");
  }
  absl::StrAppend(out, "}\n");
}

}  // namespace

absl::StatusOr<std::string> DescribeByReflection(std::shared_ptr<grpc::Channel> channel,
                                                 const std::string& symbol,
                                                 absl::Duration timeout) {
  ReflectionSession session(std::move(channel), timeout);
  std::vector<std::string> services;
  if (symbol.empty()) {
    absl::StatusOr<std::vector<std::string>> listed = session.ListServices();
    if (!listed.ok()) return listed.status();
    services = *listed;
  } else {
    if (absl::Status s = session.LoadSymbol(symbol); !s.ok()) return s;
  }
  std::string out;
  std::set<std::string> done;
  auto describe_service = [&](const gpb::ServiceDescriptor& s) {
    DescribeService(s, &out);
    for (int i = 0; i < s.method_count(); ++i) {
      DescribeEnumsOf(*s.method(i)->input_type(), &done, &out);
      DescribeEnumsOf(*s.method(i)->output_type(), &done, &out);
    }
    for (int i = 0; i < s.method_count(); ++i) {
      DescribeMessage(*s.method(i)->input_type(), &done, &out);
      DescribeMessage(*s.method(i)->output_type(), &done, &out);
    }
    absl::StrAppend(&out, "\n");
  };
  for (const std::string& name : services) {
    if (name == "grpc.reflection.v1alpha.ServerReflection" ||
        name == "grpc.reflection.v1.ServerReflection") {
      absl::StrAppend(&out, "service ", name, "  (server reflection)\n\n");
      continue;
    }
    absl::Status loaded = session.LoadSymbol(name);
    if (!loaded.ok() && !absl::IsNotFound(loaded)) return loaded;
    const gpb::ServiceDescriptor* sd =
        loaded.ok() ? session.pool().FindServiceByName(name) : nullptr;
    if (sd == nullptr) {
      // Services the server implements without a descriptor (gRPC's built-in
      // health service): this client's own copy of a standard one, if any.
      sd = gpb::DescriptorPool::generated_pool()->FindServiceByName(name);
      if (sd == nullptr) {
        absl::StrAppend(&out, "service ", name, "  (the server gives no descriptor)\n\n");
        continue;
      }
      absl::StrAppend(&out, "// ", name, ": the server gives no descriptor; this is the "
                      "standard definition\n");
    }
    describe_service(*sd);
  }
  if (!symbol.empty()) {
    const gpb::DescriptorPool& pool = session.pool();
    if (const auto* sd = pool.FindServiceByName(symbol)) {
      describe_service(*sd);
    } else if (const auto* md = pool.FindMethodByName(symbol)) {
      const gpb::ServiceDescriptor& parent = *md->service();
      absl::StrAppend(&out, "rpc ", parent.full_name(), ".", md->name(), "(",
                      md->client_streaming() ? "stream " : "", md->input_type()->full_name(),
                      ") returns (", md->server_streaming() ? "stream " : "",
                      md->output_type()->full_name(), ")\n");
      DescribeMessage(*md->input_type(), &done, &out);
      DescribeMessage(*md->output_type(), &done, &out);
    } else if (const auto* m = pool.FindMessageTypeByName(symbol)) {
      DescribeEnumsOf(*m, &done, &out);
      DescribeMessage(*m, &done, &out);
    } else if (const auto* e = pool.FindEnumTypeByName(symbol)) {
      absl::StrAppend(&out, e->DebugString());
    } else {
      return absl::NotFoundError(absl::StrCat("'", symbol, "' is not a service, method, "
                                              "message or enum the server describes"));
    }
  }
  return out;
}

}  // namespace conv1d
