// LoadRunner (load_runner.h), part two: the request pool (built once per
// run, registered weights included), its transport (load_transport.h) and
// the order requests are taken in.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/load/load_runner.h"

namespace conv1d {
namespace {

int64_t EstimateRequestBytes(const WorkloadSpec& s) {
  const int64_t act = s.batch * s.dim * s.seqlen * DTypeSize(s.dtype);
  return s.op == WorkloadOp::kBackward ? 2 * act : act;
}

}  // namespace

absl::Status LoadRunner::Setup(RunReport* report) {
  absl::StatusOr<v1::ServerInfoResponse> info = client_->ServerInfo();
  ++report->setup_calls;
  if (!info.ok()) {
    return absl::Status(info.status().code(),
                        absl::StrCat("server not reachable: ", info.status().message()));
  }
  std::printf("server: %s backend, version %s\n", info->backend().c_str(), info->version().c_str());
  const auto& w = options_.workloads;
  const uint64_t seed = options_.seed;
  // Pool: each workload gets up to pool_size requests within its share of the
  // byte budget, built in parallel so large pools do not stall start-up.
  std::vector<int> sizes;
  for (size_t i = 0; i < w.size(); ++i) {
    weights_.push_back(MakeWeights(w[i], seed * 1000003 + i));
    const int64_t budget = options_.pool_bytes / static_cast<int64_t>(w.size());
    const int64_t fit = budget / std::max<int64_t>(1, EstimateRequestBytes(w[i]));
    // A region holds every pool request's inputs: a few per workload.
    const int most = options_.memory == "grpc" ? options_.pool_size
                                               : std::min(options_.pool_size, 4);
    sizes.push_back(static_cast<int>(std::clamp<int64_t>(fit, 2, std::max(2, most))));
  }
  for (size_t i = 0; i < w.size(); ++i) {
    if (!w[i].registered_weights) {
      registered_names_.push_back("");
      continue;
    }
    std::string name = w[i].weights_name;
    if (name.empty()) {
      name = absl::StrCat("conv1d_load_", getpid(), "_", i);
      v1::RegisterWeightsRequest req;
      req.set_name(name);
      req.set_replace(true);
      weights_[i].weight.ToProto(req.mutable_weight());
      if (!weights_[i].bias.empty()) weights_[i].bias.ToProto(req.mutable_bias());
      absl::StatusOr<v1::RegisterWeightsResponse> r = client_->RegisterWeights(req);
      ++report->setup_calls;
      if (!r.ok()) {
        return absl::Status(r.status().code(),
                            absl::StrCat("registering weights: ", r.status().message()));
      }
      registered_names_.push_back(name);
    } else {
      registered_names_.push_back("");  // the user's set: values unknown here
    }
  }
  std::vector<std::vector<PoolItem>> per(w.size());
  for (size_t i = 0; i < w.size(); ++i) per[i].resize(sizes[i]);
  std::vector<std::thread> threads;
  const unsigned nthreads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned t = 0; t < nthreads; ++t) {
    threads.emplace_back([&, t] {
      size_t k = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        WorkloadSpec spec = w[i];
        if (spec.registered_weights && spec.weights_name.empty()) {
          spec.weights_name = registered_names_[i];
        }
        for (int j = 0; j < sizes[i]; ++j, ++k) {
          if (k % nthreads != t) continue;
          PoolItem& item = per[i][j];
          item.workload = static_cast<int>(i);
          item.req = BuildRequest(spec, weights_[i], seed * 7919 + 104729 * i + 31 * j + 5);
          item.req.spec_index = static_cast<int>(i);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  if (!options_.input_x.empty() || !options_.input_dout.empty() ||
      !options_.input_state.empty()) {
    // The files' arrays replace the random ones; every request is the same.
    per[0].resize(1);
    PreparedRequest& p = per[0][0].req;
    const HostTensor &x = options_.input_x, &dout = options_.input_dout,
                     &state = options_.input_state;
    if (p.forward) {
      auto m = std::make_shared<v1::ForwardRequest>(*p.forward);
      if (!x.empty()) x.ToProto(m->mutable_x());
      if (!state.empty()) state.ToProto(m->mutable_initial_states());
      p.forward = std::move(m);
    } else if (p.backward) {
      auto m = std::make_shared<v1::BackwardRequest>(*p.backward);
      if (!x.empty()) x.ToProto(m->mutable_x());
      if (!dout.empty()) dout.ToProto(m->mutable_dout());
      if (!state.empty()) state.ToProto(m->mutable_initial_states());
      p.backward = std::move(m);
    } else if (p.update) {
      auto m = std::make_shared<v1::UpdateRequest>(*p.update);
      if (!x.empty()) x.ToProto(m->mutable_x());
      if (!state.empty()) state.ToProto(m->mutable_conv_state());
      p.update = std::move(m);
    }
    sizes[0] = 1;
  }
  std::vector<int> first;
  for (size_t i = 0; i < w.size(); ++i) {
    first.push_back(static_cast<int>(pool_.size()));
    for (auto& item : per[i]) {
      item.index = static_cast<int>(pool_.size());
      pool_.push_back(std::move(item));
    }
  }
  {
    std::vector<const PreparedRequest*> requests;
    for (const PoolItem& item : pool_) requests.push_back(&item.req);
    double in_flight = 1;
    for (double l : options_.levels) in_flight = std::max(in_flight, l);
    if (!options_.closed_loop) in_flight = options_.max_outstanding;
    absl::Status s = transport_->Prepare(requests, w, static_cast<int>(in_flight));
    ++report->setup_calls;
    if (!s.ok()) return s;
  }
  // Schedule: mix shares over 4096 slots, then shuffled deterministically.
  double total = 0;
  for (const auto& s : w) total += s.mix_weight;
  FastRng rng(seed ^ 0x5eed);
  std::vector<int> rr(w.size(), 0);
  for (int k = 0; k < 4096; ++k) {
    double u = rng.UniformDouble() * total;
    size_t i = 0;
    while (i + 1 < w.size() && u >= w[i].mix_weight) u -= w[i++].mix_weight;
    schedule_.push_back(first[i] + (rr[i]++ % sizes[i]));
  }
  int64_t pool_bytes = 0;
  for (const auto& item : pool_) pool_bytes += item.req.request_tensor_bytes;
  std::printf("request pool: %zu requests, %.1f MB\n", pool_.size(), pool_bytes / 1e6);
  if (options_.verify_fraction > 0) verifier_ = std::thread([this] { VerifierLoop(); });
  return absl::OkStatus();
}

void LoadRunner::Teardown() {
  transport_->Teardown();
  for (const std::string& name : registered_names_) {
    if (name.empty()) continue;
    v1::UnregisterWeightsRequest req;
    req.set_name(name);
    static_cast<void>(client_->UnregisterWeights(req));
  }
}

const LoadRunner::PoolItem& LoadRunner::NextItem() {
  const uint64_t k = next_.fetch_add(1, std::memory_order_relaxed);
  return pool_[schedule_[k % schedule_.size()]];
}

}  // namespace conv1d
