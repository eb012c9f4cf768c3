// A structure-aware mutator for trace.pt inputs (libFuzzer's LLVMFuzzerCustomMutator and
// LLVMFuzzerCustomCrossOver, container_mutator_hooks.cc): the input is split into its records,
// one record-level change is made (a record's payload or header mutated, a record duplicated
// under the same or a new sequence number, deleted, moved, or records spliced in from another
// input), and the file is written back with every payload checksum and header check valid, so
// the change reaches the payload parsers, the sideband model and the decoders instead of being
// rejected as damage. A copy of the first AUX record under a new sequence number, as this
// makes, is what found issue 12 item 5. One change in eight is a plain byte mutation of the
// whole file without resealing, for the reader's damage paths.
//
// PTKIT_FUZZ_MUTATOR=bytes in the environment turns it off (libFuzzer's own mutations only),
// to compare the two.
#ifndef PTKIT_TESTS_FUZZ_CONTAINER_MUTATOR_H_
#define PTKIT_TESTS_FUZZ_CONTAINER_MUTATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "ptkit/container_format.h"

namespace ptkit::fuzz {

// One record of a container: its header (sizes and checksum are recomputed when written) and
// its payload, decompressed when it was stored compressed and decompresses (`zstd`: stored
// compressed when written). A payload that does not decompress is kept as stored (`opaque`).
struct MutableRecord {
  FrameHeader header;
  std::vector<uint8_t> payload;
  bool zstd = false;
  bool opaque = false;
  // A compressed record's bytes as read, written again while `payload` is unchanged (a
  // mutation of the payload clears it); empty otherwise.
  std::vector<uint8_t> stored;
};

struct MutableContainer {
  std::vector<MutableRecord> records;
  std::vector<uint8_t> tail;  // bytes after the last whole frame (a cut or damaged end)
};

// The records of a trace.pt, or nothing when `file` has no valid file header. Records are
// read up to the first frame whose sync word is damaged or whose payload is cut; a frame's
// header check is not looked at.
std::optional<MutableContainer> SplitContainer(std::span<const uint8_t> file);
// The container as a file: each record's sizes, checksum and header check are recomputed.
std::vector<uint8_t> JoinContainer(const MutableContainer& c);

// libFuzzer's byte mutator (LLVMFuzzerMutate): mutates data[0, size) in place, up to
// max_size bytes, and returns the new size.
using ByteMutator = std::function<size_t(uint8_t* data, size_t size, size_t max_size)>;

// One structure-aware mutation of the input in data[0, size); returns the new size (at most
// max_size). Not a container: `bytes` mutates it.
size_t MutateContainer(uint8_t* data, size_t size, size_t max_size, unsigned seed,
                       const ByteMutator& bytes);

// Records of `second` spliced into `first` at a record boundary, into out[0, max_out);
// returns the size, 0 when either is not a container.
size_t CrossOverContainers(std::span<const uint8_t> first, std::span<const uint8_t> second,
                           uint8_t* out, size_t max_out, unsigned seed);

}  // namespace ptkit::fuzz

#endif  // PTKIT_TESTS_FUZZ_CONTAINER_MUTATOR_H_
