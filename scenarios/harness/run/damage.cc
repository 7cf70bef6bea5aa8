#include "harness/run/damage.h"

#include <fmt/format.h>

#include "core/error.h"
#include "io/env.h"

namespace distckpt {

std::string ApplyDamage(const DamageSpec& damage, const std::string& dir) {
  Env* env = Env::Default();
  const std::string path = JoinPath(dir, damage.file);
  if (!env->FileExists(path) || env->IsDirectory(path)) {
    Fail(ErrorKind::kInvalidArgument, "damage: {} is not a file of the checkpoint", path);
  }
  std::string bytes = ReadFileToString(env, path);
  const auto size = static_cast<int64_t>(bytes.size());
  std::string what;
  if (damage.truncate) {
    if (*damage.truncate > size) {
      Fail(ErrorKind::kInvalidArgument, "damage: cannot truncate {} ({} bytes) to {} bytes", path,
           size, *damage.truncate);
    }
    what = fmt::format("truncate {} from {} to {} bytes", damage.file, size, *damage.truncate);
    bytes.resize(*damage.truncate);
  } else {
    if (damage.at >= size) {
      Fail(ErrorKind::kInvalidArgument, "damage: byte {} is beyond the end of {} ({} bytes)",
           damage.at, path, size);
    }
    const auto old = static_cast<uint8_t>(bytes[damage.at]);
    what = fmt::format("set byte {} of {} ({} bytes) from 0x{:02x} to 0x{:02x}", damage.at,
                       damage.file, size, old, damage.value);
    bytes[damage.at] = static_cast<char>(damage.value);
  }
  WriteFileAtomic(env, path, bytes);
  return what;
}

}  // namespace distckpt
