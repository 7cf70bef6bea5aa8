#include "manager/tracker.h"

#include <charconv>
#include <string_view>

#include "core/error.h"
#include "core/printable.h"
#include "manager/layout.h"

namespace distckpt {

std::string Tracker::ToString() const { return release ? "release" : std::to_string(iteration); }

std::string TrackerPath(const std::string& root) { return JoinPath(root, kTrackerFile); }

Tracker ParseTracker(const std::string& text, const std::string& source) {
  // Megatron reads int(f.read().strip()): whitespace on either side is fine.
  constexpr std::string_view kSpace = " \t\r\n\v\f";
  const size_t begin = text.find_first_not_of(kSpace);
  const std::string body = begin == std::string::npos
                               ? ""
                               : text.substr(begin, text.find_last_not_of(kSpace) + 1 - begin);
  if (body == "release") return {0, true};
  int64_t value = -1;
  auto [ptr, ec] = std::from_chars(body.data(), body.data() + body.size(), value);
  if (body.empty() || ec != std::errc() || ptr != body.data() + body.size() || value < 0) {
    Fail(ErrorKind::kCorruption,
         "tracker {}: expected an iteration or 'release', found '{}' ({} bytes)", source,
         Printable(body), text.size());
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
