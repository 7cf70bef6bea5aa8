#include "manager/tracker.h"

#include <charconv>

#include "core/error.h"
#include "manager/layout.h"

namespace distckpt {

std::string Tracker::ToString() const { return release ? "release" : std::to_string(iteration); }

std::string TrackerPath(const std::string& root) { return JoinPath(root, kTrackerFile); }

Tracker ParseTracker(const std::string& text, const std::string& source) {
  size_t end = text.find_last_not_of(" \t\r\n");
  std::string body = end == std::string::npos ? "" : text.substr(0, end + 1);
  if (body == "release") return {0, true};
  int64_t value = -1;
  auto [ptr, ec] = std::from_chars(body.data(), body.data() + body.size(), value);
  if (body.empty() || ec != std::errc() || ptr != body.data() + body.size() || value < 0) {
    Fail(ErrorKind::kCorruption,
         "tracker {}: expected an iteration or 'release', found '{}' ({} bytes)", source,
         body.substr(0, 40), text.size());
  }
  return {value, false};
}

std::optional<Tracker> ReadTracker(Env* env, const std::string& root) {
  std::string path = TrackerPath(root);
  if (!env->FileExists(path)) return std::nullopt;
  return ParseTracker(ReadFileToString(env, path), path);
}

void WriteTracker(Env* env, const std::string& root, const Tracker& tracker) {
  WriteFileAtomic(env, TrackerPath(root), tracker.ToString() + "\n");
}

}  // namespace distckpt
