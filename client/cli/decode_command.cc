#include "client/cli/decode_command.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/time/clock.h"
#include "client/decode_session.h"
#include "client/verify.h"

namespace conv1d {

int RunDecodeCommand(Conv1dClient& client, const DecodeCommand& c) {
  const v1::ForwardRequest& whole = c.whole;
  const bool cl = whole.layout() == v1::LAYOUT_CHANNEL_LAST;
  v1::OpenSessionRequest open;
  if (whole.weights_case() == v1::ForwardRequest::kWeightsName) {
    open.set_weights_name(whole.weights_name());
  } else {
    *open.mutable_inline_weights() = whole.inline_weights();
  }
  open.set_dtype(whole.x().dtype());
  open.set_layout(whole.layout());
  open.set_activation(whole.activation());
  open.set_batch(whole.x().shape(0));
  open.set_state_len(c.state_len);
  absl::StatusOr<std::unique_ptr<DecodeSession>> session = DecodeSession::Open(client, open);
  if (!session.ok()) {
    std::fprintf(stderr, "conv1d_client: open: %s\n", session.status().ToString().c_str());
    return 2;
  }
  const int64_t len = whole.x().shape(cl ? 1 : 2);
  const int64_t step = std::max<int64_t>(1, c.step_tokens);
  std::vector<v1::Tensor> ys;
  std::vector<double> us;
  for (int64_t t = 0; t < len; t += step) {
    const int64_t n = std::min(step, len - t);
    const v1::Tensor x = SliceTokens(whole.x(), cl, t, n);
    const absl::Time t0 = absl::Now();
    absl::StatusOr<v1::Tensor> y = (*session)->Step(x);
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
    if (!y.ok()) {
      std::fprintf(stderr, "conv1d_client: step at token %lld: %s\n",
                   static_cast<long long>(t), y.status().ToString().c_str());
      return 2;
    }
    ys.push_back(*std::move(y));
  }
  if (absl::Status s = (*session)->Close(); !s.ok()) {
    std::fprintf(stderr, "conv1d_client: close: %s\n", s.ToString().c_str());
    return 2;
  }
  std::sort(us.begin(), us.end());
  std::printf("  session          %s, %zu steps of %lld tokens\n", (*session)->id().c_str(),
              us.size(), static_cast<long long>(step));
  std::printf("  step latency     p50 %.1f us, p99 %.1f us\n", us[us.size() / 2],
              us[std::min(us.size() - 1, us.size() * 99 / 100)]);
  if (!c.verify) return 0;
  v1::ForwardResponse joined;
  *joined.mutable_y() = ConcatTokens(ys, cl);
  absl::Status s = VerifyResponse(whole, joined, c.registered);
  if (!s.ok()) {
    std::printf("  verify           FAILED\n");
    std::fprintf(stderr, "conv1d_client: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("  verify           OK (steps equal the CPU reference's Forward)\n");
  return 0;
}

}  // namespace conv1d
