// `ptdecode info`: a summary of a trace.pt file built from one streaming pass.
#ifndef PTKIT_INFO_H_
#define PTKIT_INFO_H_

#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace ptkit {

// Reads the whole container once and summarises it as JSON (schema in man/ptdecode.1):
// metadata, per record kind and per stream counts and bytes (stored vs raw), compression
// ratio, loss totals, damage, unknown kinds, footer presence. The metadata is every record
// merged and read as the decoders read it (ptkit/recording_metadata.h): a record that cannot
// be read is listed in "malformed", a member of the wrong type in "warnings" (and shown as it
// is). Errors: those of ContainerReader::Open and I/O errors while reading.
absl::StatusOr<nlohmann::json> ContainerInfo(const std::string& path);

// Renders ContainerInfo's JSON as the human-readable text `ptdecode info` prints.
std::string FormatInfoText(const nlohmann::json& info);

}  // namespace ptkit

#endif  // PTKIT_INFO_H_
