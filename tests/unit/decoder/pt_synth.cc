#include "pt_synth.h"

#include <Zydis/Zydis.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "absl/status/status.h"
#include "fmt/format.h"

namespace ptkit::decoder::testing {

absl::StatusOr<ElfCode> ElfCode::Load(const std::string& path) {
  elf_version(EV_CURRENT);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError("open " + path);
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  if (elf == nullptr) {
    close(fd);
    return absl::InvalidArgumentError(path + ": not ELF");
  }
  ElfCode code;
  size_t phnum = 0;
  elf_getphdrnum(elf, &phnum);
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr phdr;
    gelf_getphdr(elf, static_cast<int>(i), &phdr);
    if (phdr.p_type != PT_LOAD || phdr.p_filesz == 0) continue;
    Segment seg{phdr.p_vaddr, phdr.p_offset, std::string(phdr.p_filesz, '\0')};
    if (pread(fd, seg.bytes.data(), phdr.p_filesz, static_cast<off_t>(phdr.p_offset)) !=
        static_cast<ssize_t>(phdr.p_filesz)) {
      elf_end(elf);
      close(fd);
      return absl::DataLossError(path + ": short read");
    }
    code.segments_.push_back(std::move(seg));
  }
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr shdr;
    gelf_getshdr(scn, &shdr);
    if (shdr.sh_type != SHT_SYMTAB) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    for (size_t i = 0; i < shdr.sh_size / shdr.sh_entsize; ++i) {
      GElf_Sym sym;
      gelf_getsym(data, static_cast<int>(i), &sym);
      const char* name = elf_strptr(elf, shdr.sh_link, sym.st_name);
      if (name != nullptr && *name != '\0') code.symbols_[name] = {sym.st_value, sym.st_size};
    }
  }
  elf_end(elf);
  close(fd);
  return code;
}

size_t ElfCode::Read(uint64_t va, uint8_t* out, size_t size) const {
  for (const Segment& s : segments_) {
    if (va >= s.vaddr && va < s.vaddr + s.bytes.size()) {
      size_t n = std::min<size_t>(size, s.vaddr + s.bytes.size() - va);
      std::copy_n(s.bytes.data() + (va - s.vaddr), n, out);
      return n;
    }
  }
  return 0;
}

ElfCode::Sym ElfCode::Symbol(const std::string& name) const {
  auto it = symbols_.find(name);
  return it == symbols_.end() ? Sym{} : it->second;
}

uint64_t ElfCode::FileOffset(uint64_t va) const {
  for (const Segment& s : segments_) {
    if (va >= s.vaddr && va < s.vaddr + s.bytes.size()) return s.offset + (va - s.vaddr);
  }
  return 0;
}

PtSynth::PtSynth(const ElfCode& code) : code_(code), buffer_(1 << 22) {
  pt_config config;
  pt_config_init(&config);
  config.begin = buffer_.data();
  config.end = buffer_.data() + buffer_.size();
  encoder_ = pt_alloc_encoder(&config);
}

PtSynth::~PtSynth() { pt_free_encoder(encoder_); }

uint64_t PtSynth::offset() const {
  uint64_t offset = 0;
  pt_enc_get_offset(encoder_, &offset);
  return offset;
}

std::vector<uint8_t> PtSynth::bytes() const {
  return std::vector<uint8_t>(buffer_.begin(), buffer_.begin() + offset());
}

void PtSynth::Emit(const pt_packet& packet) {
  int err = pt_enc_next(encoder_, &packet);
  if (err < 0) {
    // A test bug: make it loud.
    std::fprintf(stderr, "pt_enc_next(type %d): %s\n", packet.type, pt_errstr(pt_errcode(err)));
    std::abort();
  }
}

void PtSynth::AddPacket(const pt_packet& packet) { Emit(packet); }

void PtSynth::AddPsbPlusPge(uint64_t ip) {
  pt_packet p = {};
  p.type = ppt_psb;
  Emit(p);
  p = {};
  p.type = ppt_mode;
  p.payload.mode.leaf = pt_mol_exec;
  p.payload.mode.bits.exec = pt_set_exec_mode(ptem_64bit);
  Emit(p);
  p = {};
  p.type = ppt_psbend;
  Emit(p);
  p = {};
  p.type = ppt_tip_pge;
  p.payload.ip.ipc = pt_ipc_sext_48;
  p.payload.ip.ip = ip & 0xffffffffffffull;
  Emit(p);
  last_ip_ = ip;
}

pt_packet TakenTnt() {
  pt_packet p = {};
  p.type = ppt_tnt_8;
  p.payload.tnt.bit_size = 1;
  p.payload.tnt.payload = 1;
  return p;
}

void PtSynth::EmitIp(pt_packet_type type, uint64_t ip) {
  pt_packet p = {};
  p.type = type;
  // IP compression against the last IP, as the hardware does it.
  if ((ip >> 16) == (last_ip_ >> 16)) {
    p.payload.ip.ipc = pt_ipc_update_16;
    p.payload.ip.ip = ip & 0xffff;
  } else if ((ip >> 32) == (last_ip_ >> 32)) {
    p.payload.ip.ipc = pt_ipc_update_32;
    p.payload.ip.ip = ip & 0xffffffff;
  } else {
    p.payload.ip.ipc = pt_ipc_sext_48;
    p.payload.ip.ip = ip & 0xffffffffffffull;
  }
  last_ip_ = ip;
  Emit(p);
}

void PtSynth::FlushTnt() {
  if (tnt_count_ == 0) return;
  pt_packet p = {};
  p.type = tnt_count_ <= 6 ? ppt_tnt_8 : ppt_tnt_64;
  p.payload.tnt.bit_size = tnt_count_;
  p.payload.tnt.payload = tnt_bits_;  // the oldest branch is the most significant bit
  Emit(p);
  tnt_bits_ = 0;
  tnt_count_ = 0;
}

absl::StatusOr<std::vector<uint64_t>> PtSynth::AddSegment(const WalkOptions& options) {
  ZydisDecoder decoder;
  ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  std::mt19937 rng(options.seed);

  pt_packet p = {};
  p.type = ppt_psb;
  Emit(p);
  last_ip_ = 0;  // PSB resets the last IP
  p = {};
  p.type = ppt_mode;
  p.payload.mode.leaf = pt_mol_exec;
  p.payload.mode.bits.exec = pt_set_exec_mode(ptem_64bit);
  Emit(p);
  if (options.tsc != 0) {
    p = {};
    p.type = ppt_tsc;
    p.payload.tsc.tsc = options.tsc;
    Emit(p);
  }
  p = {};
  p.type = ppt_psbend;
  Emit(p);
  EmitIp(ppt_tip_pge, options.entry);

  std::vector<uint64_t> ips;
  std::vector<uint64_t> stack = {options.return_address};
  uint64_t ip = options.entry;
  int branch = 0;
  // Tracing stops at a branch: TIP.PGD carries the branch target.
  auto end_segment = [&](uint64_t target) {
    FlushTnt();
    EmitIp(ppt_tip_pgd, target);
  };
  for (;;) {
    uint8_t bytes[ZYDIS_MAX_INSTRUCTION_LENGTH];
    size_t n = code_.Read(ip, bytes, sizeof(bytes));
    ZydisDecodedInstruction insn;
    if (n == 0 ||
        !ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&decoder, nullptr, bytes, n, &insn))) {
      return absl::InvalidArgumentError(fmt::format("walk: no instruction at {:#x}", ip));
    }
    ips.push_back(ip);
    const uint64_t next = ip + insn.length;
    const bool at_limit = ips.size() >= options.max_insns;
    switch (insn.meta.category) {
      case ZYDIS_CATEGORY_COND_BR: {
        if (branch++ == options.corrupt_at_branch) {
          FlushTnt();
          EmitIp(ppt_tip, next);  // a TIP where a TNT bit belongs
          return ips;
        }
        bool taken = (rng() & 0xff) < options.taken_per_256;
        if (branch - 1 == options.overflow_at_branch) {
          FlushTnt();
          pt_packet ovf = {};
          ovf.type = ppt_ovf;
          Emit(ovf);
          last_ip_ = 0;  // the decoder forgets the last IP at an overflow
          ip = taken ? next + static_cast<uint64_t>(insn.raw.imm[0].value.s) : next;
          EmitIp(ppt_fup, ip);
          break;
        }
        if (at_limit) {
          end_segment(taken ? next + static_cast<uint64_t>(insn.raw.imm[0].value.s) : next);
          return ips;
        }
        tnt_bits_ = (tnt_bits_ << 1) | (taken ? 1 : 0);
        if (++tnt_count_ == 47) FlushTnt();
        ip = taken ? next + static_cast<uint64_t>(insn.raw.imm[0].value.s) : next;
        break;
      }
      case ZYDIS_CATEGORY_UNCOND_BR:
        if (!insn.raw.imm[0].is_relative) {
          return absl::InvalidArgumentError(fmt::format("walk: indirect jump at {:#x}", ip));
        }
        ip = next + static_cast<uint64_t>(insn.raw.imm[0].value.s);
        break;
      case ZYDIS_CATEGORY_CALL:
        if (!insn.raw.imm[0].is_relative) {
          return absl::InvalidArgumentError(fmt::format("walk: indirect call at {:#x}", ip));
        }
        stack.push_back(next);
        ip = next + static_cast<uint64_t>(insn.raw.imm[0].value.s);
        break;
      case ZYDIS_CATEGORY_RET:
        if (at_limit || stack.size() == 1) {
          end_segment(stack.back());
          return ips;
        }
        // Uncompressed return: the TNT bits before it, then a TIP with the target.
        FlushTnt();
        ip = stack.back();
        stack.pop_back();
        EmitIp(ppt_tip, ip);
        break;
      default:
        ip = next;
        break;
    }
    if (ips.size() > 100 * options.max_insns) {
      return absl::InvalidArgumentError("walk: no conditional branch or return to stop at");
    }
  }
}

std::vector<uint8_t> BtsFromWalk(const ElfCode& code, const std::vector<uint64_t>& ips,
                                 std::vector<size_t>* branches) {
  ZydisDecoder decoder;
  ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < ips.size(); ++i) {
    uint8_t bytes[ZYDIS_MAX_INSTRUCTION_LENGTH];
    size_t n = code.Read(ips[i], bytes, sizeof(bytes));
    ZydisDecodedInstruction insn;
    if (n == 0 ||
        !ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&decoder, nullptr, bytes, n, &insn))) {
      std::abort();  // the walk decoded it before
    }
    if (ips[i + 1] == ips[i] + insn.length) continue;
    uint64_t record[3] = {ips[i], ips[i + 1], 0};
    const uint8_t* p = reinterpret_cast<const uint8_t*>(record);
    out.insert(out.end(), p, p + sizeof(record));
    if (branches != nullptr) branches->push_back(i);
  }
  return out;
}

BtsWalks LongBtsFromWalks(const ElfCode& code, uint64_t entry, size_t min_bytes) {
  BtsWalks out;
  for (uint32_t seed = 1; out.records.size() < min_bytes; ++seed) {
    PtSynth synth(code);
    auto ips = synth.AddSegment({.entry = entry, .seed = seed, .max_insns = 3000});
    if (!ips.ok() || ips->empty()) std::abort();  // the walk decoded this code before
    std::vector<size_t> branches;
    const std::vector<uint8_t> bts = BtsFromWalk(code, *ips, &branches);
    if (branches.empty()) continue;
    const uint64_t enable[3] = {0, ips->front(), 0};
    const auto* p = reinterpret_cast<const uint8_t*>(enable);
    out.records.insert(out.records.end(), p, p + sizeof(enable));
    out.records.insert(out.records.end(), bts.begin(), bts.end());
    out.flow.insert(out.flow.end(), ips->begin(), ips->begin() + branches.back() + 1);
  }
  return out;
}

std::vector<uint8_t> KernelBtsLayout(const std::vector<uint8_t>& records, uint64_t ring_size,
                                     uint64_t start) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 24 <= records.size(); i += 24) {
    const uint64_t left = ring_size - (start + out.size()) % ring_size;
    if (left < 24) out.resize(out.size() + left, 0);
    out.insert(out.end(), records.begin() + i, records.begin() + i + 24);
  }
  return out;
}

}  // namespace ptkit::decoder::testing
