#include "record/swpt/synthesizer.h"

#include <Zydis/Zydis.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ptkit/status.h"
#include "record/swpt/bts_writer.h"

namespace ptkit::swpt {
namespace {

// Where a jump or call that leaves the image goes, as far as the trace says (TIP.PGD payload).
constexpr uint64_t kOutside = 0x7f0000001000;
// Marks a shadow-stack entry pushed by a signal: returning through it leaves the image (the
// sigreturn trampoline) and resumes at the interrupted instruction. The mark flips bit 62: a
// canonical address (user or kernel) has bits 62 and 63 equal, a marked entry does not.
constexpr uint64_t kSignalFrame = uint64_t{1} << 62;
bool IsSignalFrame(uint64_t entry) { return ((entry >> 63) & 1) != ((entry >> 62) & 1); }
constexpr uint32_t kNoTable = std::numeric_limits<uint32_t>::max();
constexpr size_t kMaxTableEntries = 1024;
constexpr int kTableLookBack = 16;

enum class Kind : uint8_t {
  kUnknown,  // Not decoded yet.
  kOther,
  kCond,
  kJmp,
  kCall,
  kJmpInd,
  kCallInd,
  kJmpExt,   // Through the GOT: leaves the image.
  kCallExt,  // Through the GOT: leaves the image and returns.
  kRet,
  kSyscall,
  kStop,
};

// Why a walk stopped at a kStop instruction.
enum class Stop : uint8_t { kNone, kUndecodable, kHlt, kUd, kTsx, kSystem, kFar, kOperand };
const char* StopName(Stop s) {
  switch (s) {
    case Stop::kNone:
      return "none";
    case Stop::kUndecodable:
      return "undecodable instruction";
    case Stop::kHlt:
      return "hlt";
    case Stop::kUd:
      return "ud";
    case Stop::kTsx:
      return "transactional memory";
    case Stop::kSystem:
      return "interrupt or system call instruction";
    case Stop::kFar:
      return "far transfer";
    case Stop::kOperand:
      return "unusual branch operand";
  }
  return "?";
}

struct Insn {
  uint64_t target = 0;        // Direct branches.
  uint32_t table = kNoTable;  // kJmpInd: index into State::tables.
  uint8_t len = 0;
  Kind kind = Kind::kUnknown;
  Stop stop = Stop::kNone;
};
static_assert(sizeof(Insn) == 16, "one decoded instruction per code byte: keep it small");

// Decoded instructions are cached per code byte in pages allocated on first use, so big
// executables cost memory only for the code a walk touches.
constexpr int kPageBits = 12;

// splitmix64: small, fast and good enough for branch decisions.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t Below(size_t n) { return static_cast<size_t>(Next() % n); }

 private:
  uint64_t state_;
};

uint64_t Threshold(double p) {
  if (p <= 0) return 0;
  if (p >= 1) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(p * 18446744073709551616.0);
}

}  // namespace

struct Synthesizer::State {
  CodeImage image;
  ZydisDecoder decoder;
  struct CodeRange {
    uint64_t begin;
    uint64_t end;
    std::vector<std::unique_ptr<Insn[]>> pages;  // (address - begin) >> kPageBits
  };
  std::vector<CodeRange> ranges;
  std::vector<std::vector<uint64_t>> tables;
  std::vector<uint64_t> functions;  // Candidate entries when the image has no symbols.

  explicit State(CodeImage img) : image(std::move(img)) {
    ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    for (const LoadSegment& seg : image.segments()) {
      if (!seg.exec || seg.filesz == 0) continue;
      size_t pages = ((seg.filesz - 1) >> kPageBits) + 1;
      ranges.push_back({seg.vaddr, seg.vaddr + seg.filesz});
      ranges.back().pages.resize(pages);
    }
  }

  // A stripped image has no (usable) function symbols: take the targets of direct calls found
  // by a linear sweep of the executable segments as function entries. Computed once.
  bool swept = false;
  const std::vector<uint64_t>& CallTargets() {
    if (!swept) FindCallTargets();
    swept = true;
    return functions;
  }
  void FindCallTargets() {
    for (const CodeRange& r : ranges) {
      for (uint64_t a = r.begin; a < r.end;) {
        ZydisDecodedInstruction insn;
        ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
        if (!DecodeAt(a, &insn, ops)) {
          ++a;
          continue;
        }
        uint64_t target = 0;
        if (insn.meta.category == ZYDIS_CATEGORY_CALL &&
            ops[0].type == ZYDIS_OPERAND_TYPE_IMMEDIATE &&
            ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&insn, &ops[0], a, &target)) &&
            target != a + insn.length && image.IsCode(target)) {
          functions.push_back(target);
        }
        a += insn.length;
      }
    }
    std::sort(functions.begin(), functions.end());
    functions.erase(std::unique(functions.begin(), functions.end()), functions.end());
  }

  bool DecodeAt(uint64_t ip, ZydisDecodedInstruction* insn, ZydisDecodedOperand* ops) const {
    size_t avail = 0;
    const uint8_t* p = image.Read(ip, &avail);
    if (!p) return false;
    return ZYAN_SUCCESS(
        ZydisDecoderDecodeFull(&decoder, p, std::min<size_t>(avail, 15), insn, ops));
  }

  const Insn* Get(uint64_t ip) {
    for (CodeRange& r : ranges) {
      if (ip >= r.begin && ip < r.end) {
        uint64_t index = ip - r.begin;
        std::unique_ptr<Insn[]>& page = r.pages[index >> kPageBits];
        if (!page) page = std::make_unique<Insn[]>(size_t{1} << kPageBits);
        Insn& in = page[index & ((1u << kPageBits) - 1)];
        if (in.kind == Kind::kUnknown) Decode(ip, &in);
        return &in;
      }
    }
    return nullptr;
  }

  void Decode(uint64_t ip, Insn* out);
  uint32_t FindJumpTable(uint64_t ip, const ZydisDecodedInstruction& insn,
                         const ZydisDecodedOperand& op);
};

void Synthesizer::State::Decode(uint64_t ip, Insn* out) {
  ZydisDecodedInstruction insn;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
  if (!DecodeAt(ip, &insn, ops)) {
    out->kind = Kind::kStop;
    out->stop = Stop::kUndecodable;
    return;
  }
  out->len = insn.length;
  out->kind = Kind::kOther;
  const ZydisDecodedOperand& op = ops[0];
  auto stop = [&](Stop why) {
    out->kind = Kind::kStop;
    out->stop = why;
  };
  switch (insn.mnemonic) {
    case ZYDIS_MNEMONIC_HLT:
      return stop(Stop::kHlt);
    case ZYDIS_MNEMONIC_UD0:
    case ZYDIS_MNEMONIC_UD1:
    case ZYDIS_MNEMONIC_UD2:
      return stop(Stop::kUd);
    case ZYDIS_MNEMONIC_XBEGIN:
    case ZYDIS_MNEMONIC_XABORT:
    case ZYDIS_MNEMONIC_XEND:
      return stop(Stop::kTsx);
    case ZYDIS_MNEMONIC_SYSCALL:
      out->kind = Kind::kSyscall;
      return;
    default:
      break;
  }
  switch (insn.meta.category) {
    case ZYDIS_CATEGORY_INTERRUPT:
    case ZYDIS_CATEGORY_SYSRET:
    case ZYDIS_CATEGORY_SYSCALL:
      return stop(Stop::kSystem);
    case ZYDIS_CATEGORY_COND_BR: {
      uint64_t target = 0;
      if (op.type != ZYDIS_OPERAND_TYPE_IMMEDIATE ||
          !ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&insn, &op, ip, &target))) {
        return stop(Stop::kOperand);
      }
      out->kind = Kind::kCond;
      out->target = target;
      return;
    }
    case ZYDIS_CATEGORY_UNCOND_BR:
    case ZYDIS_CATEGORY_CALL: {
      bool call = insn.meta.category == ZYDIS_CATEGORY_CALL;
      if (insn.meta.branch_type == ZYDIS_BRANCH_TYPE_FAR) return stop(Stop::kFar);
      if (op.type == ZYDIS_OPERAND_TYPE_IMMEDIATE) {
        uint64_t target = 0;
        if (!ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&insn, &op, ip, &target))) {
          return stop(Stop::kOperand);
        }
        out->kind = call ? Kind::kCall : Kind::kJmp;
        out->target = target;
        return;
      }
      if (op.type == ZYDIS_OPERAND_TYPE_MEMORY && op.mem.base == ZYDIS_REGISTER_RIP) {
        uint64_t slot = 0;
        ZydisCalcAbsoluteAddress(&insn, &op, ip, &slot);
        if (image.IsGot(slot)) {
          out->kind = call ? Kind::kCallExt : Kind::kJmpExt;
          return;
        }
      }
      if (op.type != ZYDIS_OPERAND_TYPE_MEMORY && op.type != ZYDIS_OPERAND_TYPE_REGISTER) {
        return stop(Stop::kOperand);
      }
      out->kind = call ? Kind::kCallInd : Kind::kJmpInd;
      if (!call) out->table = FindJumpTable(ip, insn, op);
      return;
    }
    case ZYDIS_CATEGORY_RET:
      if (insn.meta.branch_type == ZYDIS_BRANCH_TYPE_FAR) return stop(Stop::kFar);
      out->kind = Kind::kRet;
      return;
    default:
      if (insn.meta.branch_type == ZYDIS_BRANCH_TYPE_FAR) return stop(Stop::kFar);
      return;
  }
}

// Jump tables as GCC emits them for switch statements:
//   non-PIE: jmp *table(,%reg,8) or mov table(,%reg,8),%reg; jmp *%reg  (absolute entries)
//   PIE:     lea table(%rip),%reg; movslq (%reg,%idx,4),..; add; jmp *%reg  (entries relative
//            to the table).
// Entries are taken while they point at instruction boundaries of the same function.
uint32_t Synthesizer::State::FindJumpTable(uint64_t ip, const ZydisDecodedInstruction& insn,
                                           const ZydisDecodedOperand& op) {
  const Function* fn = image.FunctionAt(ip);
  if (!fn) return kNoTable;
  // Instruction boundaries of the function by linear sweep (GCC keeps data out of .text).
  std::vector<uint64_t> starts;
  for (uint64_t a = fn->addr; a < fn->addr + fn->size;) {
    ZydisDecodedInstruction i;
    ZydisDecodedOperand o[ZYDIS_MAX_OPERAND_COUNT];
    if (!DecodeAt(a, &i, o)) break;
    starts.push_back(a);
    a += i.length;
  }
  auto pos = std::lower_bound(starts.begin(), starts.end(), ip);
  if (pos == starts.end() || *pos != ip) return kNoTable;

  auto is_abs_table = [&](const ZydisDecodedOperand& m) {
    return m.type == ZYDIS_OPERAND_TYPE_MEMORY && m.mem.base == ZYDIS_REGISTER_NONE &&
           m.mem.index != ZYDIS_REGISTER_NONE && m.mem.scale == 8 && !image.pie();
  };
  uint64_t table = 0;
  bool relative = false;
  if (is_abs_table(op)) {
    table = static_cast<uint64_t>(op.mem.disp.value);
  } else if (op.type == ZYDIS_OPERAND_TYPE_REGISTER) {
    for (int back = 1; back <= kTableLookBack && pos - back >= starts.begin(); ++back) {
      uint64_t a = *(pos - back);
      ZydisDecodedInstruction i;
      ZydisDecodedOperand o[ZYDIS_MAX_OPERAND_COUNT];
      if (!DecodeAt(a, &i, o)) break;
      if (i.mnemonic == ZYDIS_MNEMONIC_LEA && o[1].type == ZYDIS_OPERAND_TYPE_MEMORY &&
          o[1].mem.base == ZYDIS_REGISTER_RIP) {
        ZydisCalcAbsoluteAddress(&i, &o[1], a, &table);
        relative = true;
        break;
      }
      if (i.mnemonic == ZYDIS_MNEMONIC_MOV && is_abs_table(o[1])) {
        table = static_cast<uint64_t>(o[1].mem.disp.value);
        break;
      }
    }
  }
  (void)insn;
  if (table == 0) return kNoTable;
  std::vector<uint64_t> targets;
  for (size_t n = 0; n < kMaxTableEntries; ++n) {
    size_t avail = 0;
    uint64_t target = 0;
    if (relative) {
      const uint8_t* p = image.Read(table + 4 * n, &avail);
      if (!p || avail < 4) break;
      int32_t entry;
      std::memcpy(&entry, p, 4);
      target = table + static_cast<int64_t>(entry);
    } else {
      const uint8_t* p = image.Read(table + 8 * n, &avail);
      if (!p || avail < 8) break;
      std::memcpy(&target, p, 8);
      target += image.bias();
    }
    if (!std::binary_search(starts.begin(), starts.end(), target)) break;
    targets.push_back(target);
  }
  if (targets.empty()) return kNoTable;
  std::sort(targets.begin(), targets.end());
  targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
  tables.push_back(std::move(targets));
  return static_cast<uint32_t>(tables.size() - 1);
}

Synthesizer::Synthesizer(std::unique_ptr<State> state) : state_(std::move(state)) {}
Synthesizer::Synthesizer(Synthesizer&&) noexcept = default;
Synthesizer& Synthesizer::operator=(Synthesizer&&) noexcept = default;
Synthesizer::~Synthesizer() = default;

const CodeImage& Synthesizer::image() const { return state_->image; }

absl::StatusOr<Synthesizer> Synthesizer::Create(const std::string& elf_path, uint64_t pie_base) {
  PTKIT_ASSIGN_OR_RETURN(CodeImage image, CodeImage::Load(elf_path, pie_base));
  return Synthesizer(std::make_unique<State>(std::move(image)));
}

absl::StatusOr<SynthResult> Synthesizer::Walk(const SynthOptions& options) {
  State& s = *state_;
  std::vector<uint64_t> pool;
  for (const Function& f : s.image.functions()) {
    bool wanted = options.target_prefix.empty() ? (!f.name.empty() && f.name[0] != '_')
                                                : f.name.starts_with(options.target_prefix);
    if (wanted && s.image.IsCode(f.addr)) pool.push_back(f.addr);
  }
  if (pool.empty() && options.target_prefix.empty()) pool = s.CallTargets();
  Rng rng(options.seed);
  // The entry: a function name, a run-time address ("0x..."), or "*" for a random function
  // at every (re)entry.
  const bool random_entry = options.entry == "*";
  std::optional<uint64_t> entry;
  if (random_entry) {
    if (pool.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("no functions to start at in ", s.image.path()));
    }
  } else if (options.entry.starts_with("0x")) {
    uint64_t addr = 0;
    if (!absl::SimpleHexAtoi(options.entry.substr(2), &addr) || !s.image.IsCode(addr)) {
      return absl::NotFoundError(
          absl::StrCat("entry ", options.entry, " is not code in ", s.image.path()));
    }
    entry = addr;
  } else {
    entry = s.image.FunctionAddress(options.entry);
    if (!entry) {
      return absl::NotFoundError(
          absl::StrCat("no function '", options.entry, "' in ", s.image.path()));
    }
  }
  auto next_entry = [&]() { return random_entry ? pool[rng.Below(pool.size())] : *entry; };
  PTKIT_ASSIGN_OR_RETURN(PtEncoder enc, PtEncoder::Create(options.pt));
  BtsWriter bts;
  const uint64_t fwd = Threshold(options.forward_taken);
  const uint64_t back = Threshold(options.backward_taken);

  SynthResult r;
  if (options.keep_truth) r.truth.reserve(options.max_insns);
  std::vector<uint64_t> shadow;
  size_t psb_seen = 0;
  uint64_t count = 0;

  auto emit = [&](const Event& e) -> absl::Status {
    PTKIT_RETURN_IF_ERROR(enc.Add(e));
    if (options.bts) bts.Add(e);
    if (enc.psbs().size() != psb_seen) {
      for (; psb_seen < enc.psbs().size(); ++psb_seen) {
        r.psbs.push_back({enc.psbs()[psb_seen].offset, count});
      }
    }
    return absl::OkStatus();
  };
  auto pick = [&](const std::vector<uint64_t>& from) -> absl::StatusOr<uint64_t> {
    if (from.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("no indirect branch targets in ", s.image.path()));
    }
    return from[rng.Below(from.size())];
  };

  uint64_t ip = next_entry();
  PTKIT_RETURN_IF_ERROR(emit(Event::Enable(ip)));
  uint64_t tick_left = options.tick_every;
  uint64_t signal_left = options.signal_every;
  uint64_t overflow_left = options.overflow_every;
  bool overflow_due = false;
  while (count < options.max_insns) {
    const Insn* in = s.Get(ip);
    if (!in || in->kind == Kind::kStop) {
      r.stop_reason = in ? absl::StrCat(StopName(in->stop), " at 0x", absl::Hex(ip))
                         : absl::StrCat("no code at 0x", absl::Hex(ip));
      break;
    }
    if (options.keep_truth) r.truth.push_back(ip);
    ++count;
    bool traced = false;  // The instruction produced a packet (TNT bit, TIP, TIP.PGD/PGE).
    switch (in->kind) {
      case Kind::kOther:
        ip += in->len;
        break;
      case Kind::kCond: {
        traced = true;
        bool taken = rng.Next() < (in->target <= ip ? back : fwd);
        ++r.branches;
        PTKIT_RETURN_IF_ERROR(emit(Event::Cond(ip, in->len, taken, in->target)));
        ip = taken ? in->target : ip + in->len;
        break;
      }
      case Kind::kJmp:
        PTKIT_RETURN_IF_ERROR(emit(Event::Simple(EventKind::kDirectJump, ip, in->target)));
        ip = in->target;
        break;
      case Kind::kCall:
        PTKIT_RETURN_IF_ERROR(emit(Event::Simple(EventKind::kDirectCall, ip, in->target, in->len)));
        // A call to the next instruction only reads the IP; no RET will match it.
        if (in->target != ip + in->len) shadow.push_back(ip + in->len);
        ip = in->target;
        break;
      case Kind::kJmpInd: {
        traced = true;
        PTKIT_ASSIGN_OR_RETURN(uint64_t target,
                               pick(in->table == kNoTable ? pool : s.tables[in->table]));
        ++r.indirect;
        if (in->table != kNoTable) ++r.table_jumps;
        PTKIT_RETURN_IF_ERROR(emit(Event::Simple(EventKind::kIndirectJump, ip, target)));
        ip = target;
        break;
      }
      case Kind::kCallInd: {
        traced = true;
        PTKIT_ASSIGN_OR_RETURN(uint64_t target, pick(pool));
        ++r.indirect;
        PTKIT_RETURN_IF_ERROR(emit(Event::Simple(EventKind::kIndirectCall, ip, target, in->len)));
        shadow.push_back(ip + in->len);
        ip = target;
        break;
      }
      case Kind::kRet:
        traced = true;
        ++r.indirect;
        if (shadow.empty()) {
          // The entry function returns to its (untraced) caller, which calls it again.
          ++r.exits;
          PTKIT_RETURN_IF_ERROR(emit(Event::Disable(ip, kOutside, false)));
          ip = next_entry();
          PTKIT_RETURN_IF_ERROR(emit(Event::Enable(ip)));
        } else if (IsSignalFrame(shadow.back())) {
          // Signal handler returns to the trampoline; rt_sigreturn resumes the interrupted code.
          ++r.exits;
          PTKIT_RETURN_IF_ERROR(emit(Event::Disable(ip, kOutside, false)));
          ip = shadow.back() ^ kSignalFrame;
          shadow.pop_back();
          PTKIT_RETURN_IF_ERROR(emit(Event::Enable(ip)));
        } else {
          uint64_t target = shadow.back();
          shadow.pop_back();
          PTKIT_RETURN_IF_ERROR(emit(Event::Simple(EventKind::kReturn, ip, target)));
          ip = target;
        }
        break;
      case Kind::kJmpExt:
        traced = true;
        // PLT stub: the external function runs untraced and returns to our caller.
        ++r.exits;
        PTKIT_RETURN_IF_ERROR(emit(Event::Disable(ip, kOutside, false)));
        if (shadow.empty()) {
          ip = next_entry();
        } else {
          ip = IsSignalFrame(shadow.back()) ? shadow.back() ^ kSignalFrame : shadow.back();
          shadow.pop_back();
        }
        PTKIT_RETURN_IF_ERROR(emit(Event::Enable(ip)));
        break;
      case Kind::kCallExt:
        traced = true;
        ++r.exits;
        PTKIT_RETURN_IF_ERROR(emit(Event::Disable(ip, kOutside, false)));
        ip += in->len;
        PTKIT_RETURN_IF_ERROR(emit(Event::Enable(ip)));
        break;
      case Kind::kSyscall:
        traced = true;
        // User-only tracing: the kernel is out of context, so TIP.PGD carries no IP.
        PTKIT_RETURN_IF_ERROR(emit(Event::Disable(ip, 0, true)));
        ip += in->len;
        PTKIT_RETURN_IF_ERROR(emit(Event::Enable(ip)));
        break;
      case Kind::kUnknown:
      case Kind::kStop:
        break;
    }
    if (tick_left != 0 && --tick_left == 0) {
      tick_left = options.tick_every;
      PTKIT_RETURN_IF_ERROR(emit(Event::Tick(options.tick_every)));
    }
    if (signal_left != 0 && --signal_left == 0) {
      signal_left = options.signal_every;
      PTKIT_ASSIGN_OR_RETURN(uint64_t handler, pick(pool));
      ++r.signals;
      if (rng.Next() & 1) {
        // Tracing stays on (kernel traced too, or a fault handled in user mode): FUP + TIP.
        PTKIT_RETURN_IF_ERROR(emit(Event::Simple(EventKind::kInterrupt, ip, handler)));
      } else {
        // User-only tracing: the interrupt enters the kernel (FUP + TIP.PGD), which delivers
        // the signal (TIP.PGE at the handler).
        PTKIT_RETURN_IF_ERROR(emit(Event::AsyncDisable(ip)));
        PTKIT_RETURN_IF_ERROR(emit(Event::Enable(handler)));
      }
      shadow.push_back(ip ^ kSignalFrame);
      ip = handler;
    }
    if (overflow_left != 0 && --overflow_left == 0) overflow_due = true;
    // An overflow loses the packets between the last one the decoder used and the FUP; it has
    // nothing to lose only right after a branch that produced a packet. Inject it there.
    if (overflow_due && traced) {
      overflow_due = false;
      overflow_left = options.overflow_every;
      ++r.overflows;
      PTKIT_RETURN_IF_ERROR(emit(Event::Overflow(ip)));
    }
  }
  if (r.stop_reason.empty()) r.stop_reason = "max_insns";
  PTKIT_RETURN_IF_ERROR(emit(Event::AsyncDisable(ip)));
  PTKIT_RETURN_IF_ERROR(enc.Finish());
  r.pt = enc.TakeBytes();
  if (options.bts) r.bts = bts.TakeBytes();
  r.insns = count;
  r.events = enc.events();
  return r;
}

}  // namespace ptkit::swpt
