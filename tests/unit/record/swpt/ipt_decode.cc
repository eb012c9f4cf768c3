#include "ipt_decode.h"

#include <Zydis/Zydis.h>
#include <intel-pt.h>

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"

namespace ptkit::swpt::testing {
namespace {

struct ImageDeleter {
  void operator()(pt_image* i) const { pt_image_free(i); }
};
struct InsnDecoderDeleter {
  void operator()(pt_insn_decoder* d) const { pt_insn_free_decoder(d); }
};
struct BlockDecoderDeleter {
  void operator()(pt_block_decoder* d) const { pt_blk_free_decoder(d); }
};

std::unique_ptr<pt_image, ImageDeleter> MakeImage(const CodeImage& image, int* error) {
  std::unique_ptr<pt_image, ImageDeleter> img(pt_image_alloc("swpt"));
  for (const LoadSegment& seg : image.segments()) {
    if (seg.filesz == 0) continue;
    int rc = pt_image_add_file(img.get(), image.path().c_str(), seg.file_offset, seg.filesz,
                               nullptr, seg.vaddr);
    if (rc < 0) *error = rc;
  }
  return img;
}

void Count(const pt_event& ev, InsnDecode& out) {
  switch (ev.type) {
    case ptev_enabled:
      ++out.enabled;
      break;
    case ptev_disabled:
      ++out.disabled;
      break;
    case ptev_async_disabled:
      ++out.async_disabled;
      break;
    case ptev_overflow:
      ++out.overflows;
      break;
    default:
      break;
  }
}

}  // namespace

std::string InsnDecode::Describe() const {
  return absl::StrCat(
      ips.size(), " insns, error ", error,
      error ? absl::StrCat(" (", pt_errstr(pt_errcode(error)), ") at offset ", error_offset) : "",
      ", enabled ", enabled, " disabled ", disabled, " async_disabled ", async_disabled,
      " overflows ", overflows);
}

InsnDecode DecodeInsns(const std::vector<uint8_t>& pt, const CodeImage& image,
                       std::optional<uint64_t> sync_offset) {
  InsnDecode out;
  auto img = MakeImage(image, &out.error);
  if (out.error) return out;
  pt_config config;
  pt_config_init(&config);
  config.begin = const_cast<uint8_t*>(pt.data());
  config.end = const_cast<uint8_t*>(pt.data()) + pt.size();
  std::unique_ptr<pt_insn_decoder, InsnDecoderDeleter> dec(pt_insn_alloc_decoder(&config));
  if (!dec) {
    out.error = -pte_nomem;
    return out;
  }
  pt_insn_set_image(dec.get(), img.get());

  bool first = true;
  for (;;) {
    int status = (first && sync_offset) ? pt_insn_sync_set(dec.get(), *sync_offset)
                                        : pt_insn_sync_forward(dec.get());
    first = false;
    if (status < 0) {
      if (status != -pte_eos) out.error = status;
      break;
    }
    for (;;) {
      while (status & pts_event_pending) {
        pt_event ev;
        status = pt_insn_event(dec.get(), &ev, sizeof(ev));
        if (status < 0) break;
        Count(ev, out);
      }
      if (status < 0) break;
      pt_insn insn;
      status = pt_insn_next(dec.get(), &insn, sizeof(insn));
      if (status < 0) break;
      out.ips.push_back(insn.ip);
    }
    if (status == -pte_eos) break;
    out.error = status;
    pt_insn_get_offset(dec.get(), &out.error_offset);
    break;  // The synthesized trace must decode without errors; stop at the first one.
  }
  return out;
}

}  // namespace ptkit::swpt::testing

namespace ptkit::swpt::testing {

InsnDecode DecodeBlocks(const std::vector<uint8_t>& pt, const CodeImage& image,
                        std::optional<uint64_t> sync_offset) {
  InsnDecode out;
  auto img = MakeImage(image, &out.error);
  if (out.error) return out;
  pt_config config;
  pt_config_init(&config);
  config.begin = const_cast<uint8_t*>(pt.data());
  config.end = const_cast<uint8_t*>(pt.data()) + pt.size();
  std::unique_ptr<pt_block_decoder, BlockDecoderDeleter> dec(pt_blk_alloc_decoder(&config));
  if (!dec) {
    out.error = -pte_nomem;
    return out;
  }
  pt_blk_set_image(dec.get(), img.get());
  ZydisDecoder zydis;
  ZydisDecoderInit(&zydis, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);

  bool first = true;
  for (;;) {
    int status = (first && sync_offset) ? pt_blk_sync_set(dec.get(), *sync_offset)
                                        : pt_blk_sync_forward(dec.get());
    first = false;
    if (status < 0) {
      if (status != -pte_eos) out.error = status;
      break;
    }
    for (;;) {
      while (status & pts_event_pending) {
        pt_event ev;
        status = pt_blk_event(dec.get(), &ev, sizeof(ev));
        if (status < 0) break;
        Count(ev, out);
      }
      if (status < 0) break;
      pt_block block;
      status = pt_blk_next(dec.get(), &block, sizeof(block));
      // A block is valid even when pt_blk_next reports an error after it.
      // Instructions of a block are sequential in execution, not in memory: a block goes on
      // across direct jumps and calls (libipt's default block configuration).
      uint64_t ip = block.ip;
      for (uint16_t i = 0; i < block.ninsn; ++i) {
        out.ips.push_back(ip);
        size_t avail = 0;
        const uint8_t* bytes = image.Read(ip, &avail);
        ZydisDecodedInstruction insn;
        ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
        if (!bytes || !ZYAN_SUCCESS(ZydisDecoderDecodeFull(
                          &zydis, bytes, std::min<size_t>(avail, 15), &insn, ops))) {
          out.error = -pte_bad_insn;
          return out;
        }
        bool direct = (insn.meta.category == ZYDIS_CATEGORY_UNCOND_BR ||
                       insn.meta.category == ZYDIS_CATEGORY_CALL) &&
                      ops[0].type == ZYDIS_OPERAND_TYPE_IMMEDIATE && ops[0].imm.is_relative;
        uint64_t target = 0;
        if (direct && ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&insn, &ops[0], ip, &target))) {
          ip = target;
        } else {
          ip += insn.length;
        }
      }
      if (status < 0) break;
    }
    if (status == -pte_eos) break;
    out.error = status;
    pt_blk_get_offset(dec.get(), &out.error_offset);
    break;
  }
  return out;
}

}  // namespace ptkit::swpt::testing
