// CheckpointMetadata <-> JSON, the contents of the native format's
// metadata.json (format version 3, versions 1 and 2 still read; FORMAT.md beside this file). Ranks
// send each other their metadata in wire/messages.h's codec, never this JSON.
//
// Parsing is strict and never crashes on bad input: a missing or ill-typed
// field, an unknown dtype, a negative or overflowing size, a chunk outside
// its tensor, a length that disagrees with the chunk's elements, or a data
// file name that is not a plain name inside the checkpoint directory is
// CheckpointError(kCorruption) "<source>: <json path>: <problem>". A newer
// format_version is CheckpointError(kUnsupported) naming both versions.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_FORMAT_NATIVE_METADATA_JSON_H_
#define DISTCKPT_FORMAT_NATIVE_METADATA_JSON_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "format/checkpoint_metadata.h"

namespace distckpt {

inline constexpr char kMetadataFileName[] = "metadata.json";
inline constexpr int kNativeFormatVersion = 5;  // writes 5, reads 1 to 5

nlohmann::json MetadataToJson(const CheckpointMetadata& metadata);
// `source` names the input in error messages (a path, "rank metadata").
CheckpointMetadata MetadataFromJson(const nlohmann::json& json, const std::string& source);

// metadata.json text: deterministic (sorted keys), short records on one line.
std::string MetadataToText(const CheckpointMetadata& metadata);
// Parses text; malformed JSON is CheckpointError(kCorruption) naming `source`.
CheckpointMetadata MetadataFromText(std::string_view text, const std::string& source);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_NATIVE_METADATA_JSON_H_
