// Test helper: turns a walk over real ELF machine code into genuine Intel PT with libipt's
// encoder, and keeps the ground truth (every executed instruction address).
//
// The walk follows direct jumps and calls, decides conditional branches with a seeded oracle
// (std::mt19937 bits, identical on every platform) and returns through its own call stack.
// Packets: PSB, MODE.exec, PSBEND, TIP.PGE, TNT-8/TNT-64, TIP (IP compression as hardware
// does it: 16/32-bit updates or sign-extended 48-bit), TIP.PGD with the target IP at the end (as
// when code leaves an IP filter range).
#ifndef PTKIT_TESTS_UNIT_DECODER_PT_SYNTH_H_
#define PTKIT_TESTS_UNIT_DECODER_PT_SYNTH_H_

#include <intel-pt.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ptkit::decoder::testing {

// The PT_LOAD bytes and .symtab of an ELF file, read with libelf (independently of
// ProgramImage, which is under test).
class ElfCode {
 public:
  static absl::StatusOr<ElfCode> Load(const std::string& path);
  // Copies up to `size` bytes at `va`; returns how many.
  size_t Read(uint64_t va, uint8_t* out, size_t size) const;
  struct Sym {
    uint64_t address = 0;
    uint64_t size = 0;
  };
  // A symbol by name; address 0 when absent.
  Sym Symbol(const std::string& name) const;
  // File offset of virtual address `va` (0 when not in a segment).
  uint64_t FileOffset(uint64_t va) const;

 private:
  struct Segment {
    uint64_t vaddr, offset;
    std::string bytes;
  };
  std::vector<Segment> segments_;
  std::map<std::string, Sym> symbols_;
};

struct WalkOptions {
  uint64_t entry = 0;
  uint32_t seed = 1;
  // Stop at the first conditional branch or return once this many instructions ran.
  uint64_t max_insns = 1000;
  // Conditional branches taken with this probability (per 256).
  uint32_t taken_per_256 = 128;
  // When not 0: a TSC packet with this value in the PSB+ (the segment's time).
  uint64_t tsc = 0;
  // Where the entry function returns to (outside the image: tracing stops there, as when
  // code leaves an IP filter range).
  uint64_t return_address = 0x7ffff0000000;
  // Test hook: at this conditional branch (0-based; -1: never), the internal buffer
  // overflows: OVF, then FUP with the IP where tracing goes on (the branch's outcome is
  // lost; the walk goes on along its oracle's choice).
  int overflow_at_branch = -1;
  // Test hook: at this conditional branch (0-based; -1: never), emit a TIP where a TNT bit
  // belongs, so the decoder fails with pte_bad_query.
  int corrupt_at_branch = -1;
};

class PtSynth {
 public:
  explicit PtSynth(const ElfCode& code);
  ~PtSynth();
  // Appends one PSB segment walking from options.entry; returns the instructions executed
  // (up to the corruption, if any). Errors: an instruction the walk cannot follow (indirect
  // branch, undecodable bytes, no code).
  absl::StatusOr<std::vector<uint64_t>> AddSegment(const WalkOptions& options);
  // Appends raw packet bytes (e.g. padding) as they are.
  void AddPacket(const pt_packet& packet);
  // Appends the start of a hand-made segment: PSB, MODE.exec (64-bit), PSBEND and TIP.PGE
  // `ip` with a sign-extended 48-bit IP, kPsbPlusPgeSize bytes.
  void AddPsbPlusPge(uint64_t ip);
  static constexpr uint64_t kPsbPlusPgeSize = 16 + 2 + 2 + 7;
  // The trace so far.
  std::vector<uint8_t> bytes() const;
  uint64_t offset() const;

 private:
  void Emit(const pt_packet& packet);
  void EmitIp(pt_packet_type type, uint64_t ip);
  void FlushTnt();

  const ElfCode& code_;
  std::vector<uint8_t> buffer_;
  pt_encoder* encoder_ = nullptr;
  uint64_t last_ip_ = 0;
  uint64_t tnt_bits_ = 0;
  uint8_t tnt_count_ = 0;
};

// A TNT-8 packet of one bit: taken.
pt_packet TakenTnt();

// The intel_bts records (24 bytes: from, to, flags 0) of a walk: one per taken branch, i.e.
// wherever the next instruction is not the one that follows in memory. `branches` gets the
// index in `ips` of each record's `from`.
std::vector<uint8_t> BtsFromWalk(const ElfCode& code, const std::vector<uint64_t>& ips,
                                 std::vector<size_t>* branches);

// At least `min_bytes` of intel_bts records: walks from `entry` (seeds 1, 2, ...), each begun
// by a "tracing enabled at its first instruction" record ({0, ips[0], 0}). `flow` is what they
// decode to: each walk's instructions up to its last record's source.
struct BtsWalks {
  std::vector<uint8_t> records;
  std::vector<uint64_t> flow;
};
BtsWalks LongBtsFromWalks(const ElfCode& code, uint64_t entry, size_t min_bytes);

// `records` (whole 24-byte BTS records) as the kernel's intel_bts lays them into an AUX ring of
// `ring_size` bytes from AUX offset `start` (a multiple of 24 in the ring) on: where fewer than
// 24 bytes are left before the ring's end, those bytes stay zero and the next record goes at
// the ring's start (arch/x86/events/intel/bts.c, bts_buffer_reset). The bytes as the AUX
// offsets [start, start + size) hold them.
std::vector<uint8_t> KernelBtsLayout(const std::vector<uint8_t>& records, uint64_t ring_size,
                                     uint64_t start);

}  // namespace ptkit::decoder::testing

#endif  // PTKIT_TESTS_UNIT_DECODER_PT_SYNTH_H_
