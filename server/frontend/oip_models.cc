#include "server/frontend/oip_models.h"

#include "absl/strings/str_join.h"

namespace conv1d {
namespace {

// Every role an op can use: RolesOf with every option on.
std::vector<Role> RolesWhere(Op op, bool inputs) {
  RoleOptions all;
  all.has_bias = all.has_initial_states = all.return_final_states = true;
  all.has_dfinal_states = all.return_dinitial_states = true;
  const RoleSet set = RolesOf(static_cast<RoleOp>(op), all);
  std::vector<Role> roles;
  for (int i = 0; i < kNumRoles; ++i) {
    const Role r = RoleAt(i);
    if (set.has(r) && IsInput(r) == inputs) roles.push_back(r);
  }
  return roles;
}

OipModel MakeModel(const char* name, Op op) {
  return OipModel{name, op, RolesWhere(op, true), RolesWhere(op, false)};
}

int RankOf(Role role) {
  switch (ShapeOf(role)) {
    case RoleShape::kWeight: return 2;
    case RoleShape::kBias: return 1;
    default: return 3;
  }
}

}  // namespace

absl::Span<const OipModel> OipModels() {
  static const std::vector<OipModel>* const models = new std::vector<OipModel>{
      MakeModel("conv1d_forward", Op::kForward),
      MakeModel("conv1d_backward", Op::kBackward),
      MakeModel("conv1d_update", Op::kUpdate),
  };
  return *models;
}

const OipModel* FindOipModel(absl::string_view name) {
  for (const OipModel& m : OipModels()) {
    if (name == m.name) return &m;
  }
  return nullptr;
}

bool IsRequiredInput(Op op, Role role) {
  return role == Role::kX || (op == Op::kBackward && role == Role::kDout) ||
         (op == Op::kUpdate && role == Role::kConvState);
}

bool IsDefaultOutput(Role role, bool has_bias) {
  if (role == Role::kFinalStates || role == Role::kDinitialStates) return false;
  if (role == Role::kDbias) return has_bias;
  return true;
}

std::string RoleList(const std::vector<Role>& roles) {
  std::vector<absl::string_view> names;
  names.reserve(roles.size());
  for (Role r : roles) names.push_back(RoleName(r));
  return absl::StrJoin(names, ", ");
}

const char* OipDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "FP32";
    case DType::kF16: return "FP16";
    case DType::kBF16: return "BF16";
  }
  return "FP32";
}

bool ParseOipDType(absl::string_view name, DType* dtype) {
  if (name == "FP32") {
    *dtype = DType::kF32;
  } else if (name == "FP16") {
    *dtype = DType::kF16;
  } else if (name == "BF16") {
    *dtype = DType::kBF16;
  } else {
    return false;
  }
  return true;
}

// Metadata and config report FP32, the dtype any client can send; FP16 and
// BF16 are accepted for every tensor as well (model parameter "datatypes").
void FillModelMetadata(const OipModel& model, inference::ModelMetadataResponse* out) {
  out->set_name(model.name);
  *out->add_versions() = std::string(kOipModelVersion);
  out->set_platform(kOipPlatform);
  for (const std::vector<Role>* roles : {&model.inputs, &model.outputs}) {
    for (Role r : *roles) {
      auto* t = IsInput(r) ? out->add_inputs() : out->add_outputs();
      t->set_name(RoleName(r));
      t->set_datatype("FP32");
      for (int i = 0; i < RankOf(r); ++i) t->add_shape(-1);
    }
  }
}

void FillModelConfig(const OipModel& model, bool on_gpu, int64_t max_queue_delay_us,
                     bool all_required, const OipSequenceConfig& sequences,
                     inference::ModelConfig* out) {
  const bool sequence_model = sequences.served && model.op == Op::kUpdate;
  out->set_name(model.name);
  out->set_platform(kOipPlatform);
  out->set_backend(kOipPlatform);
  // Requests carry their whole shape (B included); the server fuses
  // requests itself, whatever their B and L.
  out->set_max_batch_size(0);
  for (Role r : model.inputs) {
    inference::ModelInput* in = out->add_input();
    in->set_name(RoleName(r));
    in->set_data_type(inference::TYPE_FP32);
    for (int i = 0; i < RankOf(r); ++i) in->add_dims(-1);
    in->set_optional(!all_required && (!IsRequiredInput(model.op, r) ||
                                       (sequence_model && r == Role::kConvState)));
  }
  for (Role r : model.outputs) {
    inference::ModelOutput* o = out->add_output();
    o->set_name(RoleName(r));
    o->set_data_type(inference::TYPE_FP32);
    for (int i = 0; i < RankOf(r); ++i) o->add_dims(-1);
  }
  inference::ModelInstanceGroup* group = out->add_instance_group();
  group->set_name(model.name);
  group->set_count(1);
  group->set_kind(on_gpu ? inference::ModelInstanceGroup::KIND_GPU
                         : inference::ModelInstanceGroup::KIND_CPU);
  const uint64_t delay_us = static_cast<uint64_t>(max_queue_delay_us > 0 ? max_queue_delay_us : 0);
  if (sequence_model) {
    inference::ModelSequenceBatching* seq = out->mutable_sequence_batching();
    seq->set_max_sequence_idle_microseconds(
        static_cast<uint64_t>(sequences.idle_timeout_s) * 1000000u);
    seq->mutable_oldest()->set_max_candidate_sequences(
        static_cast<int32_t>(sequences.max_sequences));
    seq->mutable_oldest()->set_max_queue_delay_microseconds(delay_us);
  } else {
    out->mutable_dynamic_batching()->set_max_queue_delay_microseconds(delay_us);
  }
  (*out->mutable_parameters())["datatypes"].set_string_value("FP32,FP16,BF16");
  (*out->mutable_parameters())["activation"].set_string_value("none,silu");
  (*out->mutable_parameters())["layout"].set_string_value("channel_first,channel_last");
  out->mutable_model_transaction_policy()->set_decoupled(false);
}

}  // namespace conv1d
