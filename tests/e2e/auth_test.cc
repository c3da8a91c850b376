// Unit tests of the token file parser, the authenticator, the weight-set
// policy (server/frontend/auth.h) and the listen address check
// (listen_address.h).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/core/weight_registry.h"
#include "server/frontend/auth.h"
#include "server/frontend/listen_address.h"

namespace conv1d {
namespace {

constexpr char kAliceToken[] = "0123456789abcdef0123";
constexpr char kOpsToken[] = "fedcba9876543210fedc";

std::string TokenFile() {
  return std::string("# comment\n\n") + kAliceToken + " alice infer\n  " + kOpsToken +
         "\tops admin  \n";
}

TEST(TokenFile, ParsesEntriesCommentsAndBlankLines) {
  absl::StatusOr<TokenTable> t = ParseTokenFile(TokenFile());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), 2u);
  for (const auto& [digest, p] : *t) {
    EXPECT_EQ(digest.size(), 64u);  // SHA-256 in hex, never the token itself
    EXPECT_EQ(digest.find(kAliceToken), std::string::npos);
  }
}

TEST(TokenFile, RefusesBadLinesNamingTheLineWithoutTheToken) {
  const std::string t = kAliceToken;
  const struct {
    std::string text;
    std::string want;
  } cases[] = {
      {"", "no token entries"},
      {t + " alice\n", "line 1: 2 fields"},
      {"short alice infer\n", "line 1: token of 5 characters"},
      {"# x\n" + t + " alice root\n", "line 2: role 'root'"},
      {t + " al!ce infer\n", "line 1: principal has a character"},
      {t + "\x01 alice infer\n", "line 1: token has a character"},
      {t + " alice infer\n" + t + " bob infer\n", "line 2: token repeats"},
      {t + " alice infer\n" + kOpsToken + " alice admin\n", "line 2: principal 'alice' already"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<TokenTable> parsed = ParseTokenFile(c.text);
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status()));
    EXPECT_NE(parsed.status().message().find(c.want), std::string::npos)
        << parsed.status() << " wanted " << c.want;
    EXPECT_EQ(parsed.status().message().find(kAliceToken), std::string::npos);
  }
}

class AuthenticatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One file per process: ctest runs these tests side by side.
    path_ = absl::StrCat(::testing::TempDir(), "auth_test_tokens_", getpid());
    Write(TokenFile());
    absl::StatusOr<std::unique_ptr<Authenticator>> a = Authenticator::Create(path_);
    ASSERT_TRUE(a.ok()) << a.status();
    auth_ = std::move(*a);
  }
  void TearDown() override { std::remove(path_.c_str()); }
  void Write(const std::string& text) { std::ofstream(path_, std::ios::trunc) << text; }

  std::string path_;
  std::unique_ptr<Authenticator> auth_;
};

TEST_F(AuthenticatorTest, MapsBearerTokensToPrincipals) {
  absl::StatusOr<Principal> p = auth_->AuthenticateHeader(std::string("Bearer ") + kAliceToken);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->name, "alice");
  EXPECT_EQ(p->role, AuthRole::kInfer);
  p = auth_->AuthenticateHeader(std::string("bearer ") + kOpsToken);  // scheme: any case
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->name, "ops");
  EXPECT_EQ(p->role, AuthRole::kAdmin);
  for (const std::string& bad : {std::string("Bearer ") + kAliceToken + "x",
                                 std::string(kAliceToken), std::string("Basic ") + kAliceToken,
                                 std::string("Bearer "), std::string("Bearer ") +
                                 std::string(600, 'a')}) {
    EXPECT_TRUE(absl::IsUnauthenticated(auth_->AuthenticateHeader(bad).status())) << bad;
  }
  std::multimap<grpc::string_ref, grpc::string_ref> none;
  EXPECT_TRUE(absl::IsUnauthenticated(auth_->Authenticate(none).status()));
}

TEST_F(AuthenticatorTest, ReloadSwapsTheTableAndKeepsItOnError) {
  Write(std::string(kOpsToken) + " carol infer\n");
  ASSERT_TRUE(auth_->Reload().ok());
  EXPECT_FALSE(auth_->AuthenticateHeader(std::string("Bearer ") + kAliceToken).ok());
  EXPECT_EQ(auth_->AuthenticateHeader(std::string("Bearer ") + kOpsToken)->name, "carol");
  Write("garbage\n");
  EXPECT_TRUE(absl::IsInvalidArgument(auth_->Reload()));
  EXPECT_EQ(auth_->AuthenticateHeader(std::string("Bearer ") + kOpsToken)->name, "carol");
  EXPECT_EQ(auth_->num_tokens(), 1u);
}

TEST(WeightPolicy, OwnersAdminsAndOthers) {
  const Principal alice{"alice", AuthRole::kInfer}, bob{"bob", AuthRole::kInfer};
  const Principal ops{"ops", AuthRole::kAdmin}, ops2{"ops2", AuthRole::kAdmin};
  WeightRegistry registry;
  const std::string w(2 * 4 * 4, '\0');
  auto may = [](const Principal& p) {
    return [p](const WeightSet& s) { return MayChangeWeights(p, s); };
  };
  auto mine = registry.Register("a", DType::kF32, 2, 4, w, absl::nullopt, false,
                                OwnerFor(alice), may(alice));
  ASSERT_TRUE(mine.ok());
  auto shared = registry.Register("s", DType::kF32, 2, 4, w, absl::nullopt, false,
                                  OwnerFor(ops), may(ops));
  ASSERT_TRUE(shared.ok());

  EXPECT_TRUE(MayUseWeights(alice, **mine).ok());
  EXPECT_TRUE(absl::IsPermissionDenied(MayUseWeights(bob, **mine)));
  EXPECT_TRUE(MayUseWeights(ops, **mine).ok());
  EXPECT_TRUE(MayUseWeights(bob, **shared).ok());

  // Refusals leave the set as it was.
  auto replaced = registry.Register("a", DType::kF32, 2, 4, w, absl::nullopt, true,
                                    OwnerFor(bob), may(bob));
  EXPECT_TRUE(absl::IsPermissionDenied(replaced.status())) << replaced.status();
  EXPECT_TRUE(absl::IsPermissionDenied(registry.Unregister("a", may(bob))));
  EXPECT_TRUE(absl::IsPermissionDenied(registry.Unregister("s", may(alice))));
  EXPECT_EQ((*registry.Lookup("a"))->id, (*mine)->id);
  EXPECT_EQ((*registry.Lookup("a"))->owner.principal, "alice");

  // The owner may replace its set; another admin may change an admin's set.
  replaced = registry.Register("a", DType::kF32, 2, 4, w, absl::nullopt, true,
                               OwnerFor(alice), may(alice));
  ASSERT_TRUE(replaced.ok());
  EXPECT_FALSE((*replaced)->owner.shared);
  EXPECT_TRUE(registry.Unregister("s", may(ops2)).ok());
  EXPECT_TRUE(registry.Unregister("a", may(alice)).ok());
  EXPECT_EQ(registry.total_bytes(), 0);
}

TEST(ListenAddress, AcceptsHostPortAndRefusesTheRest) {
  for (const char* ok : {"127.0.0.1:50051", "0.0.0.0:0", "[::]:8002", "[::1]:65535",
                         "localhost:1", "my-host.example:443"}) {
    EXPECT_TRUE(CheckListenAddress("listen", ok).ok()) << ok;
  }
  for (const char* bad : {"not-an-address", "127.0.0.1:99999", "127.0.0.1:", ":50051",
                          "127.0.0.1:-1", "127.0.0.1:5x", "::1:50051", "[::1]50051",
                          "a b:1", "127.0.0.1:000050051"}) {
    absl::Status s = CheckListenAddress("listen", bad);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_EQ(s.message().rfind("--listen: ", 0), 0u) << s;
  }
}

}  // namespace
}  // namespace conv1d
