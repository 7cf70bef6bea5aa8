// GoogleTest helpers for CheckpointError; for *_test.cc files only.
//
//   EXPECT_THAT([&] { Volume({-1}); }, ThrowsError(ErrorKind::kInvalidArgument));
//   EXPECT_THAT([&] { DTypeFromName("x"); },
//               ThrowsError(ErrorKind::kInvalidArgument, "'x'"));
#ifndef DISTCKPT_CORE_ERROR_TESTING_H_
#define DISTCKPT_CORE_ERROR_TESTING_H_

#include <gmock/gmock.h>

#include <string>

#include "core/error.h"

namespace distckpt {

// Matches a callable that throws a CheckpointError of `kind` whose message
// contains `substring`.
inline auto ThrowsError(ErrorKind kind, const std::string& substring = "") {
  return testing::Throws<CheckpointError>(
      testing::AllOf(testing::Property(&CheckpointError::kind, kind),
                     testing::Property(&CheckpointError::what, testing::HasSubstr(substring))));
}

}  // namespace distckpt

#endif  // DISTCKPT_CORE_ERROR_TESTING_H_
