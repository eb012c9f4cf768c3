// gMock matchers for absl::Status / absl::StatusOr: EXPECT_THAT(s, IsOk()),
// EXPECT_THAT(s, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("checksum"))).
#ifndef PTKIT_TESTS_SUPPORT_STATUS_MATCHERS_H_
#define PTKIT_TESTS_SUPPORT_STATUS_MATCHERS_H_

#include <gmock/gmock.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ptkit/status.h"

namespace ptkit::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s;
  return s.ok();
}

MATCHER_P(StatusIs, code, "has status code " + ::testing::PrintToString(code)) {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code;
}

MATCHER_P2(StatusIs, code, message_matcher, "has status code " + ::testing::PrintToString(code)) {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(s.message()), result_listener);
}

// Asserts that a StatusOr is OK and yields its value.
#define PTKIT_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  PTKIT_ASSERT_OK_AND_ASSIGN_IMPL_(PTKIT_STATUS_CONCAT_(ptkit_assert_or_, __LINE__), lhs, expr)
// `lhs` may be a declaration ("auto x"), so it cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define PTKIT_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                     \
  ASSERT_TRUE(tmp.ok()) << tmp.status();                 \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace ptkit::testing

#endif  // PTKIT_TESTS_SUPPORT_STATUS_MATCHERS_H_
