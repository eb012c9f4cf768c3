#include "decoder/fast_block_decoder.h"

#include <Zydis/Zydis.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <type_traits>

#include "absl/synchronization/mutex.h"
#include "decoder/insn_decode.h"
#include "decoder/ipt_handles.h"

namespace ptkit::decoder {
namespace {

// Where the conditional branch `insn` goes: its target when taken, else the next instruction.
template <typename Insn>
uint64_t CondBranchTo(const Insn& insn, bool taken) {
  return insn.ip + insn.size +
         (taken ? static_cast<uint64_t>(static_cast<int64_t>(insn.displacement)) : 0);
}

template <typename Insn>
int NextIp(uint64_t* pip, const Insn& insn) {
  uint64_t ip = insn.ip + insn.size;
  switch (insn.iclass) {
    case ptic_ptwrite:
    case ptic_other:
      break;
    case ptic_call:
    case ptic_jump:
      if (insn.is_direct) {
        ip += static_cast<uint64_t>(static_cast<int64_t>(insn.displacement));
        break;
      }
      return -pte_bad_query;
    case ptic_error:
      return -pte_bad_insn;
    default:
      return -pte_bad_query;
  }
  if (pip != nullptr) *pip = ip;
  return 0;
}

bool Never(const auto&) { return false; }

std::atomic<uint64_t> fast_block_walked_total{0};         // FastBlockDecoder::WalkedBlocks
std::atomic<uint64_t> fast_block_runs_total{0};           // FastBlockDecoder::WalkedRuns
std::atomic<uint64_t> fast_block_call_runs_total{0};      // FastBlockDecoder::WalkedCallRuns
std::atomic<uint64_t> fast_block_crossing_runs_total{0};  // FastBlockDecoder::WalkedCrossingRuns
std::atomic<uint64_t> fast_block_ahead_runs_total{0};     // FastBlockDecoder::WalkedAheadRuns
bool ChangesCr3(const auto& insn) { return insn.changes_cr3; }

}  // namespace

FastPathCoverage FastPathCovers(const pt_config& pt, const ScanProgress& scanned) {
  FastPathCoverage no;
  if (pt.flags.variant.block.enable_tick_events) return no;
  if (pt.addr_filter.config.addr_cfg != 0 && pt.errata.skl014) return no;
  FastPathCoverage yes{.blocks = true, .packets = true};
  // PacketLoop's parser first (a fraction of libipt's packet decoder's cost); libipt's packet
  // decoder decides what it does not model.
  PacketLoop::Scan scan;
  if (PacketLoop::ScanTrace(pt, &scan, scanned)) {
    if (scan.tsx || scan.paging_outside_psb) return no;
    yes.packets = PacketLoopModelsErrata(pt, scan.ovf);
    yes.walk = yes.packets && !scan.tip_suppressed;
    return yes;
  }
  return FastPathCoversByLibipt(pt, scanned);
}

FastPathCoverage FastPathCoversByLibipt(const pt_config& pt, const ScanProgress& scanned) {
  FastPathCoverage no;
  if (pt.flags.variant.block.enable_tick_events) return no;
  if (pt.addr_filter.config.addr_cfg != 0 && pt.errata.skl014) return no;
  FastPathCoverage yes{.blocks = true, .packets = true};
  PacketDecoderPtr dec(pt_pkt_alloc_decoder(&pt));
  if (!dec) return no;
  int status = pt_pkt_sync_forward(dec.get());
  if (status == -pte_eos) return yes;
  if (status < 0) return no;
  bool in_psb = false;
  uint64_t report = kScanReportBytes;
  for (;;) {
    uint64_t offset = 0;
    if (scanned && pt_pkt_get_offset(dec.get(), &offset) == 0 && offset >= report) {
      scanned(offset);
      report = offset + kScanReportBytes;
    }
    pt_packet packet;
    status = pt_pkt_next(dec.get(), &packet, sizeof(packet));
    if (status == -pte_eos) return yes;
    if (status < 0) return no;
    if (yes.packets && !PacketLoopModels(pt, packet)) yes.packets = false;
    // Erratum SKD007: libipt's query decoder reads such a CYC as the start of an OVF.
    if (yes.packets && packet.type == ppt_cyc && pt.errata.skd007 && packet.size == 2 &&
        (static_cast<uint16_t>(packet.payload.cyc.value) & ~0x1f) == 0x20) {
      uint64_t next = 0;
      if (pt_pkt_get_offset(dec.get(), &next) == 0 &&
          next < static_cast<uint64_t>(pt.end - pt.begin) && pt.begin[next] == 0xf3) {
        yes.packets = false;
      }
    }
    switch (packet.type) {
      case ppt_psb:
        in_psb = true;
        break;
      case ppt_psbend:
        in_psb = false;
        break;
      case ppt_mode:
        // Transactions (speculative blocks, aborts) go to libipt; MODE.TSX saying "none" (in
        // PSB+ of every TSX-capable CPU) is modelled.
        if (packet.payload.mode.leaf == pt_mol_tsx &&
            (packet.payload.mode.bits.tsx.intx || packet.payload.mode.bits.tsx.abrt)) {
          return no;
        }
        break;
      case ppt_ptw:
        return no;
      case ppt_pip:
      case ppt_vmcs:
        if (!in_psb) return no;  // paging/vmcs events that may bind to an instruction
        break;
      case ppt_ovf:
        in_psb = false;
        break;
      default:
        break;
    }
  }
}

std::unique_ptr<FastBlockDecoder> FastBlockDecoder::Create(const pt_config& pt,
                                                           const ProgramImage& image,
                                                           bool own_packets) {
  pt_query_decoder* qry = pt_qry_alloc_decoder(&pt);
  if (qry == nullptr) return nullptr;
  return std::unique_ptr<FastBlockDecoder>(new FastBlockDecoder(qry, pt, image, own_packets));
}

FastBlockDecoder::FastBlockDecoder(pt_query_decoder* qry, const pt_config& pt,
                                   const ProgramImage& image, bool own_packets)
    : qry_(qry),
      packets_(own_packets ? std::make_unique<PacketLoop>(pt) : nullptr),
      end_on_call_(pt.flags.variant.block.end_on_call != 0),
      end_on_jump_(pt.flags.variant.block.end_on_jump != 0),
      skd022_(pt.errata.skd022 != 0) {
  SetImage(image);
}

FastBlockDecoder::~FastBlockDecoder() {
  fast_block_walked_total.fetch_add(walked_, std::memory_order_relaxed);
  fast_block_runs_total.fetch_add(runs_given_, std::memory_order_relaxed);
  fast_block_call_runs_total.fetch_add(call_runs_given_, std::memory_order_relaxed);
  fast_block_crossing_runs_total.fetch_add(crossing_runs_given_ + ahead_runs_given_,
                                           std::memory_order_relaxed);
  fast_block_ahead_runs_total.fetch_add(ahead_runs_given_, std::memory_order_relaxed);
  pt_qry_free_decoder(qry_);
}

uint64_t FastBlockDecoder::WalkedBlocks() {
  return fast_block_walked_total.load(std::memory_order_relaxed);
}

uint64_t FastBlockDecoder::WalkedRuns() {
  return fast_block_runs_total.load(std::memory_order_relaxed);
}

uint64_t FastBlockDecoder::WalkedCallRuns() {
  return fast_block_call_runs_total.load(std::memory_order_relaxed);
}

uint64_t FastBlockDecoder::WalkedCrossingRuns() {
  return fast_block_crossing_runs_total.load(std::memory_order_relaxed);
}

uint64_t FastBlockDecoder::WalkedAheadRuns() {
  return fast_block_ahead_runs_total.load(std::memory_order_relaxed);
}

// A ProgramImage's graphs, one per set of block-ending flags.
struct FastDecoderGraphs {
  std::unique_ptr<FastBlockDecoder::Graph> by_flags[4];
};

void FastBlockDecoder::SetImage(const ProgramImage& image) {
  image_ = &image;
  caches_ = CachesFor(image);
  last_cache_ = nullptr;
  no_section_ = {1, 0};
  std::shared_ptr<FastDecoderGraphs>& graphs = image.fast_decoder_graphs();
  if (!graphs) graphs = std::make_shared<FastDecoderGraphs>();
  if (std::find(graphs_.begin(), graphs_.end(), graphs) == graphs_.end()) graphs_.push_back(graphs);
  // Blocks end where the decoder's flags say: one graph per set of them.
  std::unique_ptr<Graph>& graph = graphs->by_flags[(end_on_call_ ? 1 : 0) | (end_on_jump_ ? 2 : 0)];
  if (!graph) graph = std::make_unique<Graph>();
  graph_ = graph.get();
  walk_next_ = nullptr;  // links are within a graph
  walk_link_ = nullptr;
}

void FastBlockDecoder::Reset() {
  mode_ = ptem_unknown;
  ip_ = 0;
  status_ = 0;
  enabled_ = false;
  process_event_ = false;
  std::memset(&event_, 0, sizeof(event_));
  retstack_.Clear();
  walk_ready_ = true;  // a sync comes first: nothing is joined across it
  walk_next_ = nullptr;
  walk_link_ = nullptr;
}

int FastBlockDecoder::Status(int flags) const {
  if (!enabled_) flags |= pts_ip_suppressed;
  if ((status_ & pts_eos) && !process_event_) flags |= pts_eos;
  return flags;
}

int FastBlockDecoder::FetchEvent() {
  if (process_event_) return 1;
  if (!(status_ & pts_event_pending)) return 0;
  int status = packets_ ? packets_->Event(&event_) : pt_qry_event(qry_, &event_, sizeof(event_));
  if (status < 0) return status;
  process_event_ = true;
  status_ = status;
  return 1;
}

int FastBlockDecoder::Start(int status) {
  if (status < 0) return status;
  status_ = status;
  if (!(status & pts_ip_suppressed)) enabled_ = true;
  return ProceedTrailingEvent();
}

int FastBlockDecoder::SyncForward() {
  Reset();
  return Start(packets_ ? packets_->SyncForward(&ip_) : pt_qry_sync_forward(qry_, &ip_));
}

int FastBlockDecoder::GetSyncOffset(uint64_t* offset) const {
  return packets_ ? packets_->GetSyncOffset(offset) : pt_qry_get_sync_offset(qry_, offset);
}

// pt_insn_decode: the bytes at `ip` up to the end of their section, decoded; when they end
// inside an instruction, the rest is read from what follows (a truncated instruction).
int FastBlockDecoder::Decode(uint64_t ip, pt_exec_mode mode, const Insn** out) {
  auto [it, inserted] = graph_->insns.try_emplace(Key{ip, mode});
  Insn& insn = it->second;
  if (inserted) {
    insn.ip = ip;
    insn.mode = mode;
    insn.isid = image_->SectionAt(ip);
    size_t n = insn.isid < 0 ? 0 : image_->Read(ip, insn.raw, sizeof(insn.raw));
    if (n == 0) {
      graph_->insns.erase(it);
      return -pte_nomap;
    }
    const size_t first = n;
    // An instruction that runs past its section's end goes on in the next (libipt's truncated
    // instruction): read what follows, up to the longest instruction.
    while (n < sizeof(insn.raw)) {
      const size_t more = image_->Read(ip + n, insn.raw + n, sizeof(insn.raw) - n);
      if (more == 0) break;
      n += more;
    }
    DecodedInsn decoded;
    if (DecodeInsn(disasm_, ip, mode, insn.raw, n, &decoded) < 0) {
      graph_->insns.erase(it);
      return -pte_bad_insn;
    }
    insn.size = decoded.size;
    insn.truncated = first < decoded.size;
    insn.iclass = decoded.iclass;
    insn.is_direct = decoded.is_direct;
    insn.displacement = decoded.displacement;
    insn.changes_cr3 = decoded.changes_cr3;
    insn.vmlaunch = decoded.vmlaunch;
  }
  *out = &insn;
  return 0;
}

void FastBlockDecoder::LogCall(const Insn& insn) {
  if (insn.iclass != ptic_call) return;
  if (insn.is_direct && insn.displacement == 0) return;  // call next: position-independent code
  if (pushes_ != nullptr) {
    pushes_->push_back(insn.ip + insn.size);
  } else {
    retstack_.Push(insn.ip + insn.size);
  }
}

int FastBlockDecoder::ProceedOneInsn(pt_block* block, Insn* out, bool log_call) {
  uint16_t ninsn = static_cast<uint16_t>(block->ninsn + 1);
  if (ninsn == 0) return 0;
  if (block->truncated) return 0;
  const Insn* insn = nullptr;
  int status = Decode(ip_, mode_, &insn);
  if (status < 0) return status;
  if (insn->isid != static_cast<int>(block->isid)) {
    if (block->ninsn != 0) return 0;
    block->isid = insn->isid;
  }
  if (insn->truncated) {
    std::memcpy(block->raw, insn->raw, insn->size);
    block->size = insn->size;
    block->truncated = 1;
  }
  if (log_call) LogCall(*insn);
  block->iclass = insn->iclass;
  block->end_ip = insn->ip;
  block->ninsn = ninsn;
  *out = *insn;
  return 1;
}

int FastBlockDecoder::ProceedToInsn(pt_block* block, Insn* insn, bool (*predicate)(const Insn&)) {
  for (;;) {
    int status = ProceedOneInsn(block, insn);
    if (status <= 0) return status;
    if (predicate(*insn)) return 1;
    status = NextIp(&ip_, *insn);
    if (status < 0) return status;
    if ((end_on_call_ && insn->iclass == ptic_call) ||
        (end_on_jump_ && insn->iclass == ptic_jump)) {
      return 0;
    }
  }
}

int FastBlockDecoder::ProceedToIp(pt_block* block, Insn* insn, uint64_t ip) {
  for (;;) {
    if (ip_ == ip) return 1;
    int status = ProceedOneInsn(block, insn);
    if (status <= 0) return status;
    status = NextIp(&ip_, *insn);
    if (status < 0) return status;
    if ((end_on_call_ && insn->iclass == ptic_call) ||
        (end_on_jump_ && insn->iclass == ptic_jump)) {
      return ip_ == ip ? 1 : 0;
    }
  }
}

// pt_insn_check_insn_event's binding of a synchronous disable (pt_insn_at_disabled_event), for
// insn_binding_: the first instruction that may have disabled tracing ends the block, with the IP
// tracing would resume at. Up to it, each instruction is proceeded past as pt_insn_proceed does.
int FastBlockDecoder::ProceedToDisablingInsn(pt_block* block, const pt_event& ev) {
  for (;;) {
    Insn insn;
    int status = ProceedOneInsn(block, &insn, /*log_call=*/false);
    if (status <= 0) return status;
    uint64_t next = 0;
    status = NextIp(&next, insn);  // -pte_bad_query: the branch needs trace
    if (status < 0 && status != -pte_bad_query) return status;
    const bool binds =
        ev.ip_suppressed
            // A far branch (every CPL change is one) or a CR3 write.
            ? insn.iclass == ptic_far_call || insn.iclass == ptic_far_return ||
                  insn.iclass == ptic_far_jump || insn.changes_cr3
            // A branch, but not a direct one elsewhere than the disable's IP.
            : status < 0 || ((insn.iclass == ptic_call || insn.iclass == ptic_jump) &&
                             next == ev.variant.disabled.ip);
    if (binds) {
      ip_ = status == 0                                                ? next
            : insn.iclass == ptic_call || insn.iclass == ptic_far_call ? insn.ip + insn.size
                                                                       : 0;
      return 1;
    }
    LogCall(insn);
    if (status < 0) {
      // With the IP suppressed, a branch that needs trace queries it (and fails, the disable
      // being ahead of the query decoder's packets in any trace libipt takes).
      status = ProceedWithTrace(insn);
      return status < 0 ? status : 0;
    }
    ip_ = next;
    if ((end_on_call_ && insn.iclass == ptic_call) || (end_on_jump_ && insn.iclass == ptic_jump)) {
      return 0;
    }
  }
}

int FastBlockDecoder::ProceedToIpWithTrace(pt_block* block, uint64_t ip) {
  Insn insn;
  int status = ProceedToIp(block, &insn, ip);
  if (status != -pte_bad_query) return status;
  return ProceedWithTrace(insn);
}

// pt_blk_proceed_to_ip, for an event that binds to an IP ahead (an asynchronous branch or
// disable, TSX, EXSTOP, MWAIT). With insn_binding_, as pt_insn_next reaches it instead: it looks
// for the IP after every instruction (pt_insn_check_ip_event) and meanwhile proceeds past a
// branch that needs trace with trace (the block ends there), where pt_blk_* fails (a damaged
// trace's FUP whose IP the code never reaches).
int FastBlockDecoder::ProceedToEventIp(pt_block* block, Insn* insn, uint64_t ip) {
  if (!insn_binding_) return ProceedToIp(block, insn, ip);
  const int status = ProceedToIpWithTrace(block, ip);
  if (status < 0) return status;
  return ip_ == ip ? 1 : 0;
}

// pt_blk_next_ip: the next IP from a TNT bit (conditional branch, compressed return) or a TIP.
int FastBlockDecoder::NextIpWithTrace(uint64_t* pip, const Insn& insn) {
  int status;
  switch (insn.iclass) {
    case ptic_cond_jump: {
      int taken = 0;
      status = QueryCondBranch(&taken);
      if (status < 0) return status;
      *pip = CondBranchTo(insn, taken != 0);
      return status;
    }
    case ptic_return: {
      int taken = 0;
      status = QueryCondBranch(&taken);
      if (status < 0) {
        if (status != -pte_bad_query) return status;
        break;
      }
      if (!taken) return -pte_bad_retcomp;
      int err = retstack_.Pop(pip);
      if (err < 0) return err;
      return status;
    }
    case ptic_jump:
    case ptic_call:
      if (insn.is_direct) return -pte_internal;
      break;
    case ptic_far_call:
    case ptic_far_return:
    case ptic_far_jump:
      break;
    case ptic_ptwrite:
    case ptic_other:
      return -pte_internal;
    case ptic_error:
      return -pte_bad_insn;
  }
  return QueryIndirectBranch(pip);
}

int FastBlockDecoder::ProceedWithTrace(const Insn& insn) {
  int status = NextIpWithTrace(&ip_, insn);
  if (status < 0) return status;
  status_ = status;
  if (status & pts_ip_suppressed) return -pte_noip;
  return 0;
}

// pt_blk_proceed_no_event_uncached (code outside file sections: page dumps, captured bytes).
// On an empty block the run from ip_ comes from the graph, walked once per (IP, mode).
int FastBlockDecoder::ProceedNoEventUncached(pt_block* block) {
  if (block->ninsn != 0) {
    Insn insn;
    int status = ProceedToInsn(block, &insn, Never);
    if (status < 0) {
      if (status != -pte_bad_query) return status;
      return ProceedWithTrace(insn);
    }
    return 0;
  }
  // The last run from each of a few thousand IPs first, the graph's map behind it.
  if (!graph_->slots) graph_->slots = std::make_unique<RunSlot[]>(kRunSlots);  // zeroed
  RunSlot& slot = graph_->slots[(ip_ ^ (ip_ >> 13)) % kRunSlots];
  if (slot.run != nullptr && slot.ip == ip_ && slot.mode == mode_)
    return ApplyRun(*slot.run, block);
  auto [it, inserted] = graph_->runs.try_emplace(Key{ip_, mode_});
  Run& run = it->second;
  if (inserted) {
    const uint64_t start = ip_;
    std::memset(&run.block, 0, sizeof(run.block));
    run.last = Insn{};
    pushes_ = &run.pushes;
    int status = ProceedToInsn(&run.block, &run.last, Never);
    pushes_ = nullptr;
    if (status < 0 && status != -pte_bad_query) {
      // An error (unmapped code, a bad instruction) is not cached: apply what was walked, as
      // libipt does, and report it.
      pt_block walked = run.block;
      std::vector<uint64_t> pushes = std::move(run.pushes);
      graph_->runs.erase(it);
      for (uint64_t r : pushes) retstack_.Push(r);
      block->ninsn = walked.ninsn;
      block->end_ip = walked.end_ip;
      block->iclass = walked.iclass;
      block->isid = walked.isid;
      if (walked.truncated) {
        block->truncated = 1;
        block->size = walked.size;
        std::memcpy(block->raw, walked.raw, sizeof(block->raw));
      }
      return status;
    }
    run.status = status;
    run.next_ip = ip_;
    ip_ = start;
  }
  slot = RunSlot{ip_, mode_, &run};
  return ApplyRun(run, block);
}

int FastBlockDecoder::ApplyRun(const Run& run, pt_block* block) {
  for (uint64_t r : run.pushes) retstack_.Push(r);
  block->ninsn = run.block.ninsn;
  block->end_ip = run.block.end_ip;
  block->iclass = run.block.iclass;
  block->isid = run.block.isid;
  if (run.block.truncated) {
    block->truncated = 1;
    block->size = run.block.size;
    std::memcpy(block->raw, run.block.raw, sizeof(block->raw));
  }
  ip_ = run.next_ip;
  if (run.status == -pte_bad_query) return ProceedWithTrace(run.last);
  return 0;
}

struct FastBlockDecoder::SectionCaches {
  std::weak_ptr<pt_image_section_cache> owner;
  absl::flat_hash_map<int, std::unique_ptr<BlockCache>> by_isid;
};

// One set of block caches per libipt section cache, for as long as it lives (a new cache at a
// freed one's address starts afresh).
std::shared_ptr<FastBlockDecoder::SectionCaches> FastBlockDecoder::CachesFor(
    const ProgramImage& image) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* all = new std::map<const pt_image_section_cache*, std::shared_ptr<SectionCaches>>;
  absl::MutexLock lock(&mu);
  std::erase_if(*all, [](const auto& e) { return e.second->owner.expired(); });
  auto& caches = (*all)[image.section_cache().get()];
  if (!caches) {
    caches = std::make_shared<SectionCaches>();
    caches->owner = image.section_cache();
  }
  return caches;
}

FastBlockDecoder::BlockCache* FastBlockDecoder::CacheAtSlow(uint64_t ip) {
  AddressRange range{ip, ip + 1};
  int isid = image_->SectionAt(ip, &range);
  if (isid <= 0) {  // unmapped, or memory the callback serves: no section
    no_section_ = range;
    return nullptr;
  }
  auto& cache = caches_->by_isid[isid];
  if (!cache) {
    cache = std::make_unique<BlockCache>();
    cache->isid = isid;
    cache->range = range;
  }
  last_cache_ = cache.get();
  return last_cache_;
}

// pt_blk_decode_in_section: the bytes of the section only (a truncated instruction fails).
int FastBlockDecoder::DecodeInSection(uint64_t ip, pt_exec_mode mode, const Insn** insn) {
  int status = Decode(ip, mode, insn);
  if (status < 0) return status;
  if ((*insn)->truncated) return -pte_bad_insn;
  return 0;
}

int FastBlockDecoder::ProceedTruncated(pt_block* block) {
  const Insn* insn = nullptr;
  int status = Decode(ip_, mode_, &insn);
  if (status < 0) return status;
  if (!insn->truncated) return -pte_internal;
  std::memcpy(block->raw, insn->raw, insn->size);
  block->iclass = insn->iclass;
  block->size = insn->size;
  block->truncated = 1;
  LogCall(*insn);
  status = NextIp(&ip_, *insn);
  if (status < 0) {
    if (status != -pte_bad_query) return status;
    return ProceedWithTrace(*insn);
  }
  return 0;
}

namespace {

constexpr size_t kFillSteps = 0x400;  // libipt's bcache_fill_steps

bool InRange(const AddressRange& r, uint64_t ip) { return ip >= r.begin && ip < r.end; }

}  // namespace

namespace {

template <typename Bce, typename Insn>
void SetPoint(Bce& bce, const Insn& insn) {
  if (insn.truncated) return;  // decoded again (ProceedTruncated) each time
  bce.has_point = true;
  bce.point_size = insn.size;
  bce.point_class = insn.iclass;
  bce.point_direct = insn.is_direct;
  bce.point_displacement = insn.displacement;
}

}  // namespace

// pt_blk_proceed_no_event_fill_cache: one instruction, then (recursively) the next until a
// decision point; on the way back each instruction gets the entry to that decision point.
int FastBlockDecoder::FillCache(pt_block* block, BlockCache& bc, size_t steps) {
  auto add_decode = [&](const Insn& insn) {
    Bce bce;
    bce.ninsn = 1;
    bce.mode = insn.mode;
    bce.qualifier = kDecode;
    SetPoint(bce, insn);
    bc.entries[insn.ip] = bce;
    return 0;
  };
  auto add_trampoline = [&](const Insn& insn, uint64_t nip) {
    const int64_t disp = static_cast<int64_t>(nip - insn.ip);
    if (static_cast<int16_t>(disp) != disp) return add_decode(insn);
    Bce bce;
    bce.displacement = static_cast<int16_t>(disp);
    bce.ninsn = 1;
    bce.mode = insn.mode;
    bce.qualifier = kAgain;
    bc.entries[insn.ip] = bce;
    return 0;
  };
  Insn insn;
  int status = ProceedOneInsn(block, &insn);
  if (status <= 0) return status;
  status = NextIp(&ip_, insn);
  if (status < 0) {
    if (status != -pte_bad_query) return status;
    Bce bce;
    bce.ninsn = 1;
    bce.mode = insn.mode;
    bce.isize = insn.size <= 7 ? insn.size : 0;
    switch (insn.iclass) {
      case ptic_ptwrite:
      case ptic_error:
      case ptic_other:
        return -pte_internal;
      case ptic_jump:
        if (insn.is_direct) return -pte_internal;
        bce.qualifier = kIndirect;
        break;
      case ptic_call:
        if (insn.is_direct) return -pte_internal;
        bce.qualifier = kIndCall;
        break;
      case ptic_return:
        bce.qualifier = kReturn;
        break;
      case ptic_cond_jump:
        bce.qualifier = kCond;
        break;
      case ptic_far_call:
      case ptic_far_return:
      case ptic_far_jump:
        bce.qualifier = kIndirect;
        break;
    }
    if (block->truncated) bce.qualifier = kDecode;
    SetPoint(bce, insn);
    bc.entries[insn.ip] = bce;
    return ProceedWithTrace(insn);
  }
  const uint64_t nip = ip_;
  switch (insn.iclass) {
    case ptic_call:
      return add_decode(insn);
    case ptic_jump:
      if (!insn.is_direct) return -pte_internal;
      if (insn.displacement < 0 || end_on_jump_) return add_decode(insn);
      [[fallthrough]];
    default:
      if (!InRange(bc.range, nip) || block->truncated) return add_decode(insn);
      break;
  }
  auto it = bc.entries.find(nip);
  if (it == bc.entries.end()) {
    if (--steps == 0) return add_trampoline(insn, nip);
    status = FillCache(block, bc, steps);
    if (status < 0) return status;
    it = bc.entries.find(nip);
    if (it == bc.entries.end()) return 0;
  }
  Bce bce = it->second;
  if (bce.mode != insn.mode) return -pte_internal;
  const uint64_t dip = nip + static_cast<uint64_t>(static_cast<int64_t>(bce.displacement));
  const int64_t disp = static_cast<int64_t>(dip - insn.ip);
  if (!InRange(bc.range, dip)) return 0;
  bce.ninsn = (bce.ninsn + 1) & 0xff;
  if (bce.ninsn == 0 || static_cast<int16_t>(disp) != disp) return add_trampoline(insn, nip);
  bce.displacement = static_cast<int16_t>(disp);
  bc.entries[insn.ip] = bce;
  return 0;
}

// pt_blk_proceed_no_event_cached, its tail recursion a loop.
int FastBlockDecoder::ProceedNoEventCached(pt_block* block, BlockCache& bc) {
  for (;;) {
    auto it = bc.entries.find(ip_);
    if (it == bc.entries.end()) return FillCache(block, bc, kFillSteps);
    const Bce bce = it->second;
    const uint64_t nip = ip_ + static_cast<uint64_t>(static_cast<int64_t>(bce.displacement));
    if (!InRange(bc.range, nip)) return ProceedNoEventUncached(block);
    const uint16_t binsn = block->ninsn;
    const uint16_t ninsn = static_cast<uint16_t>(binsn + bce.ninsn);
    if (ninsn < binsn) return 0;
    ip_ = nip;
    block->end_ip = nip;
    block->ninsn = ninsn;
    block->mode = bce.mode;
    int status;
    const Insn* insn = nullptr;
    Insn point;
    switch (bce.qualifier) {
      case kAgain:
        block->iclass = ptic_error;
        continue;
      case kCond:
        block->iclass = ptic_cond_jump;
        if (bce.isize != 0) {
          int taken = 0;
          status = QueryCondBranch(&taken);
          if (status < 0) return status;
          status_ = status;
          uint64_t ip = ip_;
          if (taken) {
            int32_t displacement = bce.point_displacement;
            if (!bce.has_point) {
              status = DecodeInSection(ip, bce.mode, &insn);
              if (status < 0) return status;
              displacement = insn->displacement;
            }
            ip += static_cast<uint64_t>(static_cast<int64_t>(displacement));
          }
          ip_ = ip + bce.isize;
          return 0;
        }
        [[fallthrough]];
      case kDecode:
        if (bce.has_point) {
          point.ip = ip_;
          point.mode = bce.mode;
          point.size = bce.point_size;
          point.iclass = bce.point_class;
          point.is_direct = bce.point_direct;
          point.displacement = bce.point_displacement;
          insn = &point;
        } else {
          status = DecodeInSection(ip_, bce.mode, &insn);
          if (status < 0) {
            if (status != -pte_bad_insn) return status;
            return ProceedTruncated(block);
          }
        }
        block->iclass = insn->iclass;
        LogCall(*insn);
        status = NextIp(&ip_, *insn);
        if (status < 0) {
          if (status != -pte_bad_query) return status;
          return ProceedWithTrace(*insn);
        }
        if ((end_on_call_ && insn->iclass == ptic_call) ||
            (end_on_jump_ && insn->iclass == ptic_jump)) {
          return 0;
        }
        if (!InRange(bc.range, ip_)) return 0;
        continue;
      case kIndCall: {
        block->iclass = ptic_call;
        uint64_t ip = ip_;
        if (bce.isize != 0) {
          ip += bce.isize;
        } else if (bce.has_point) {
          ip += bce.point_size;
        } else {
          status = DecodeInSection(ip, bce.mode, &insn);
          if (status < 0) return status;
          ip += insn->size;
        }
        retstack_.Push(ip);
        status = QueryIndirectBranch(&ip_);
        if (status < 0) return status;
        status_ = status;
        return 0;
      }
      case kReturn: {
        block->iclass = ptic_return;
        int taken = 0;
        status = QueryCondBranch(&taken);
        if (status < 0) {
          if (status != -pte_bad_query) return status;
          status = QueryIndirectBranch(&ip_);
          if (status < 0) return status;
          status_ = status;
          return 0;
        }
        status_ = status;
        if (!taken) return -pte_bad_retcomp;
        return retstack_.Pop(&ip_);
      }
      case kIndirect:
        block->iclass = ptic_error;
        status = QueryIndirectBranch(&ip_);
        if (status < 0) return status;
        status_ = status;
        return 0;
    }
    return -pte_internal;
  }
}

// pt_blk_proceed_no_event: file sections through their block cache, other code uncached.
int FastBlockDecoder::ProceedNoEvent(pt_block* block) {
  BlockCache* bc = CacheAt(ip_);
  if (bc == nullptr) return ProceedNoEventUncached(block);
  if (bc->isid != static_cast<int>(block->isid)) {
    if (block->ninsn != 0) return 0;
    block->isid = bc->isid;
  }
  return ProceedNoEventCached(block, *bc);
}

int FastBlockDecoder::HandleSkd022(pt_event* ev) {
  const uint64_t saved = ip_;
  const Insn* insn = nullptr;
  int status = Decode(ev->variant.async_disabled.at, mode_, &insn);
  ip_ = saved;
  if (status < 0 || !insn->vmlaunch) return 0;
  ev->type = ptev_disabled;
  ev->variant.disabled.ip = ev->variant.async_disabled.ip;
  return 1;
}

int FastBlockDecoder::ProceedEvent(pt_block* block) {
  Insn insn;
  pt_event* ev = &event_;
  int status;
  switch (ev->type) {
    case ptev_enabled:
      break;
    case ptev_disabled:
      if (insn_binding_) {
        status = ProceedToDisablingInsn(block, *ev);
        if (status <= 0) return status;
      } else if (ev->ip_suppressed) {
        status = ProceedToInsn(block, &insn, ChangesCr3);
      } else {
        status = ProceedToIp(block, &insn, ev->variant.disabled.ip);
      }
      if (status <= 0) {
        if (status != -pte_bad_query) return status;
        // pt_blk_set_disable_resume_ip
        ip_ = (insn.iclass == ptic_call || insn.iclass == ptic_far_call) ? insn.ip + insn.size : 0;
      }
      break;
    case ptev_async_disabled:
      status = ProceedToEventIp(block, &insn, ev->variant.async_disabled.at);
      if (status <= 0) return status;
      if (skd022_ && HandleSkd022(ev) != 0) return ProceedEvent(block);
      break;
    case ptev_async_branch:
      status = ProceedToEventIp(block, &insn, ev->variant.async_branch.from);
      if (status <= 0) return status;
      break;
    case ptev_paging:
    case ptev_vmcs:
    case ptev_ptwrite:
      if (!enabled_) break;
      return -pte_internal;  // binds to an instruction: FastPathCovers() sends these to libipt
    case ptev_async_paging:
      if (!ev->ip_suppressed) {
        status = ProceedToIpWithTrace(block, ev->variant.async_paging.ip);
        if (status < 0) return status;
        if (ip_ != ev->variant.async_paging.ip) return 0;
      }
      break;
    case ptev_async_vmcs:
      if (!ev->ip_suppressed) {
        status = ProceedToIpWithTrace(block, ev->variant.async_vmcs.ip);
        if (status < 0) return status;
        if (ip_ != ev->variant.async_vmcs.ip) return 0;
      }
      break;
    case ptev_overflow:
      break;
    case ptev_exec_mode:
      if (!ev->ip_suppressed) {
        status = ProceedToIpWithTrace(block, ev->variant.exec_mode.ip);
        if (status < 0) return status;
        if (ip_ != ev->variant.exec_mode.ip) return 0;
      }
      break;
    case ptev_tsx:  // never speculative nor aborted (FastPathCovers)
      if (ev->ip_suppressed) break;
      status = ProceedToEventIp(block, &insn, ev->variant.tsx.ip);
      if (status <= 0) return status;
      break;
    case ptev_stop:
      break;
    case ptev_exstop:
      if (!enabled_ || ev->ip_suppressed) break;
      status = ProceedToEventIp(block, &insn, ev->variant.exstop.ip);
      if (status <= 0) return status;
      break;
    case ptev_mwait:
      if (!enabled_ || ev->ip_suppressed) break;
      status = ProceedToEventIp(block, &insn, ev->variant.mwait.ip);
      if (status <= 0) return status;
      break;
    case ptev_pwre:
    case ptev_pwrx:
    case ptev_tick:
    case ptev_cbr:
    case ptev_mnt:
      break;
  }
  return Status(pts_event_pending);
}

// pt_blk_proceed_trailing_event without a postponed instruction (those come only from the
// paging, vmcs and ptwrite bindings FastPathCovers() excludes).
int FastBlockDecoder::ProceedTrailingEvent() {
  int status = FetchEvent();
  if (status <= 0) {
    if (status < 0) return status;
    return Status(0);
  }
  pt_event* ev = &event_;
  switch (ev->type) {
    case ptev_disabled:
      break;
    case ptev_enabled:
      return Status(pts_event_pending);
    case ptev_async_disabled:
      if (ip_ != ev->variant.async_disabled.at) break;
      if (skd022_ && HandleSkd022(ev) != 0) break;
      return Status(pts_event_pending);
    case ptev_async_branch:
      if (ip_ != ev->variant.async_branch.from) break;
      return Status(pts_event_pending);
    case ptev_paging:
    case ptev_vmcs:
    case ptev_ptwrite:
      if (!enabled_) return Status(pts_event_pending);
      break;
    case ptev_async_paging:
      if (!ev->ip_suppressed && ip_ != ev->variant.async_paging.ip) break;
      return Status(pts_event_pending);
    case ptev_async_vmcs:
      if (!ev->ip_suppressed && ip_ != ev->variant.async_vmcs.ip) break;
      return Status(pts_event_pending);
    case ptev_overflow:
      return Status(pts_event_pending);
    case ptev_exec_mode:
      if (!ev->ip_suppressed && ip_ != ev->variant.exec_mode.ip) break;
      return Status(pts_event_pending);
    case ptev_tsx:  // not aborted: erratum BDM64 does not apply
      if (!ev->ip_suppressed && ip_ != ev->variant.tsx.ip) break;
      return Status(pts_event_pending);
    case ptev_stop:
      return Status(pts_event_pending);
    case ptev_exstop:
      if (!ev->ip_suppressed && enabled_ && ip_ != ev->variant.exstop.ip) break;
      return Status(pts_event_pending);
    case ptev_mwait:
      if (!ev->ip_suppressed && enabled_ && ip_ != ev->variant.mwait.ip) break;
      return Status(pts_event_pending);
    case ptev_pwre:
    case ptev_pwrx:
    case ptev_tick:
    case ptev_cbr:
    case ptev_mnt:
      return Status(pts_event_pending);
  }
  return Status(0);
}

int FastBlockDecoder::Proceed(pt_block* block) {
  int status = FetchEvent();
  if (status != 0) {
    if (status < 0) return status;
    return ProceedEvent(block);
  }
  if (!enabled_) {
    if (status_ & pts_eos) return -pte_eos;
    return -pte_no_enable;
  }
  status = ProceedNoEvent(block);
  if (status < 0) return status;
  // ProceedTrailingEvent without an event to fetch (only it and this function fetch one).
  if (!process_event_ && !(status_ & pts_event_pending)) return Status(0);
  return ProceedTrailingEvent();
}

// The canonical block from (ip, mode), made once: see SetWalk for where none is made.
FastBlockDecoder::Node* FastBlockDecoder::NodeAt(uint64_t ip, pt_exec_mode mode) {
  auto [it, inserted] = graph_->nodes.try_emplace(Key{ip, mode});
  Node& node = it->second;
  if (!inserted) return &node;
  node.ip = ip;
  node.mode = mode;
  uint64_t at = ip;
  for (uint32_t n = 1; n <= 0xffff; ++n) {
    const Insn* insn = nullptr;
    if (Decode(at, mode, &insn) < 0 || insn->truncated) return &node;
    if (n == 1) node.isid = insn->isid;
    uint64_t next = 0;
    const int status = NextIp(&next, *insn);
    if (status == -pte_bad_query) {
      switch (insn->iclass) {
        case ptic_cond_jump:
        case ptic_return:
        case ptic_call:
          node.iclass = insn->iclass;
          break;
        case ptic_jump:  // libipt's block cache leaves an indirect jump's class unknown
          node.iclass = CacheAt(insn->ip) != nullptr ? ptic_error : ptic_jump;
          break;
        default:  // far transfers: libipt's class for them depends on its cache's history
          return &node;
      }
      node.query = true;
    } else if (status < 0) {
      return &node;
    } else if (insn->iclass == ptic_call) {
      node.iclass = ptic_call;
      node.target = next;
    } else {
      // An inner instruction: CanonicalBlocks joins a block that ends here to the next.
      bool call = false;
      if ((insn->iclass != ptic_other && insn->iclass != ptic_jump) ||
          disasm_.Successor(mode, insn->raw, insn->size, insn->ip, &call) != next || call) {
        return &node;
      }
      at = next;
      continue;
    }
    node.last = *insn;
    node.ninsn = n;
    return &node;
  }
  return &node;
}

// One canonical block from `node`, then the branch that ends it as libipt proceeds past it
// (ProceedNoEvent's end and Proceed's trailing event).
[[gnu::always_inline]] inline int FastBlockDecoder::Walk(Node& node, pt_block* block) {
  ++walked_;
  walked_node_ = &node;
  block->ninsn = static_cast<uint16_t>(node.ninsn);
  block->end_ip = node.last.ip;
  block->iclass = node.iclass;
  block->isid = node.isid;
  LogCall(node.last);
  walk_link_ = nullptr;
  if (!node.query) {
    ip_ = node.target;
    walk_link_ = &node.next[0];
  } else if (node.last.iclass == ptic_cond_jump && packets_) {
    // ProceedWithTrace's conditional branch, inline: most walked blocks end in one.
    int taken = 0;
    const int status = packets_->CondBranch(&taken);
    if (status < 0) {
      ip_ = node.last.ip;
      return status;
    }
    ip_ = CondBranchTo(node.last, taken != 0);
    status_ = status;
    if (status & pts_ip_suppressed) return -pte_noip;
    walk_link_ = &node.next[taken ? 1 : 0];
  } else {
    ip_ = node.last.ip;
    const int status = ProceedWithTrace(node.last);
    if (status < 0) return status;
    if (node.last.iclass == ptic_cond_jump) {
      walk_link_ = &node.next[ip_ != node.last.ip + node.last.size ? 1 : 0];
    }
  }
  walk_next_ = walk_link_ != nullptr ? *walk_link_ : nullptr;
  if (!process_event_ && !(status_ & pts_event_pending)) return Status(0);
  return ProceedTrailingEvent();
}

// The run from `node` that the answers in `key` (bits of them) lead through, linked as Next
// links them (RunHead, RunBody).
// A node ending in a compressed return starts a run (`returns_to`, the return stack's top, is
// where it returns).
void FastBlockDecoder::MakeRun(RunHead& run, RunBody& body, Node& node, uint32_t key, int bits,
                               uint64_t returns_to) {
  run.node = &node;
  run.key = key;
  const bool returns_first = node.query && node.last.iclass == ptic_return;
  body.returns_to = returns_to;
  run.blocks = 0;
  run.answers = 0;
  run.flat = true;
  uint32_t ninsn = 0;
  uint32_t push_mask = 0, pop_mask = 0;  // bit i: block i pushes, pops
  uint64_t pushes[kRunBlocks];           // block i's pushed return address
  uint32_t before[kRunBits];             // the instructions before the block that takes answer i
  run.memo = {};
  // The run so far up to its last block that took an answer: where it ends.
  uint32_t end_blocks = 0;
  uint32_t end_ninsn = 0;
  Node* end_last = nullptr;
  bool end_flat = true;
  // The return addresses the run's calls pushed and no return of it popped yet.
  uint64_t stack[kRunBlocks];
  int depth = 0;
  Node* n = &node;
  for (int i = 0; i < kRunBlocks; ++i) {
    if (n->ninsn == 0 || n->mode != node.mode) break;
    const bool cond = n->query && n->last.iclass == ptic_cond_jump;
    const bool ret = n->query && n->last.iclass == ptic_return;
    const bool call = !n->query;  // NodeAt: a node that needs no trace ends in a direct call
    if (!cond && !ret && !call) break;
    bool taken = false;
    if (cond || ret) {
      if (static_cast<int>(run.answers) == bits) break;
      taken = ((key >> (bits - 1 - static_cast<int>(run.answers))) & 1) != 0;
      // Not taken: no compressed return (Walk says what is wrong with it).
      if (ret && !taken) break;
    }
    pt_block& b = body.block[i];
    std::memset(&b, 0, sizeof(b));
    b.ip = n->ip;
    b.mode = n->mode;
    b.ninsn = static_cast<uint16_t>(n->ninsn);
    b.end_ip = n->last.ip;
    b.iclass = n->iclass;
    b.isid = n->isid;
    body.memos[i] = &n->memo;
    ninsn += n->ninsn;
    run.last = n;
    run.blocks = static_cast<uint8_t>(i + 1);
    if (call) {
      run.flat = false;
      // As LogCall: `call next` (position-independent code) pushes nothing.
      if (!(n->last.is_direct && n->last.displacement == 0)) {
        const uint64_t back = n->last.ip + n->last.size;
        push_mask |= 1u << i;
        pushes[i] = back;
        stack[depth++] = back;
      }
      Node*& link = n->next[0];
      if (link == nullptr || link->ip != n->target || link->mode != n->mode) {
        link = NodeAt(n->target, n->mode);
      }
      n = link;
      continue;
    }
    before[run.answers++] = ninsn - n->ninsn;
    end_blocks = run.blocks;
    end_ninsn = ninsn;
    end_last = n;
    end_flat = run.flat && cond;
    if (ret) {
      run.flat = false;
      // A return to a call before the run: its last block (the return stack says where), but
      // for the first one's, whose address is the key's.
      if (i != 0) pop_mask |= 1u << i;
      if (depth == 0 && i != 0) break;
    }
    if (static_cast<int>(run.answers) == bits) break;
    if (ret) {
      n = NodeAt(i == 0 ? returns_to : stack[--depth], n->mode);
      continue;
    }
    const uint64_t to = CondBranchTo(n->last, taken);
    // A link is a hint (Next checks it): an event after the branch (an interrupt, tracing
    // disabled and enabled elsewhere) may have moved the IP before the next node was linked.
    Node*& link = n->next[taken ? 1 : 0];
    if (link == nullptr || link->ip != to || link->mode != n->mode) link = NodeAt(to, n->mode);
    n = link;
  }
  run.blocks = end_blocks;
  run.ninsn = end_ninsn;
  run.last = end_last;
  run.flat = end_flat;
  if (run.blocks < 2) return;
  if (returns_first) {
    // Only where the blocks after the return call or return too: a return into a loop of
    // conditional branches in one function is cheaper as a block and a run without calls (a
    // sink takes that in one step: CallStack's Count).
    bool calls = false;
    for (uint32_t i = 1; i < run.blocks; ++i) calls |= body.block[i].iclass != ptic_cond_jump;
    if (!calls) {
      run.blocks = 0;
      return;
    }
  }
  run.head_ninsn = run.ninsn - run.last->ninsn;
  for (uint32_t k = 0; k < run.answers; ++k) body.tail_ninsn[k] = run.ninsn - before[k];
  uint32_t kept_count = 0, peak = 0;
  // The blocks but the last (the masks may name blocks from it on: the loop went on past where
  // the run ends): the return addresses they leave pushed, and the most at once.
  for (uint32_t i = 0; i + 1 < run.blocks; ++i) {
    if ((push_mask >> i) & 1) {
      body.kept[kept_count++] = pushes[i];
      peak = std::max(peak, kept_count);
    } else if ((pop_mask >> i) & 1) {
      --kept_count;  // a return before the last block returns to a call of the run
    }
  }
  run.kept_count = static_cast<uint8_t>(kept_count);
  run.peak = static_cast<uint8_t>(peak);
  run.loops = run.flat && static_cast<int>(run.blocks) == bits &&
              CondBranchTo(run.last->last, (key & 1) != 0) == node.ip &&
              run.last->mode == node.mode;
}

// A lookup of a run from `node`, a block ending in a return, that gave none (Node::return_runs).
void FastBlockDecoder::NoReturnRun(Node& node) {
  node.return_runs = static_cast<int8_t>(node.return_runs - 2);
  if (node.return_runs < kTryReturnRuns) node.return_runs = -1;  // no more
}

// Walk, or a run of walks (SetRuns) ending in `node`'s run's last block.
// kReturnsFirst: `node` ends in a compressed return, and the run goes on where the return stack
// says: the key holds that address too (Next: where the stack is empty, the block's Walk says
// so). A template, so that the common case pays nothing for it.
template <bool kReturnsFirst>
int FastBlockDecoder::WalkRun(Node& node, pt_block* block) {
  constexpr bool returns_first = kReturnsFirst;
  uint64_t returns_to = 0;
  if (returns_first) retstack_.Top(&returns_to);
  const int left = packets_->TntLeft();
  int bits = std::min(left, kRunBits);
  uint64_t answers = bits > 0 ? packets_->PeekTnt(bits) : 0;
  // Where all the cached answers fit in the key, those of the TNT-8 packets right after them
  // too (up to set_ahead_limit)...
  int ahead = 0;
  if (bits < kRunBits) {
    uint64_t more = 0;
    ahead = packets_->PeekTntAhead(kRunBits - bits, &more);
    answers = answers << ahead | more;
    bits += ahead;
  }
  // ... or the next TNT packet's first one: the run's last block may take it (its Walk reads
  // that packet, as the block walked alone would; the blocks before it ran at the offset the
  // decoder is at now). TNT-8 packets (real hardware's) hold at most 6 answers: else runs
  // would end at each one's end.
  if (bits < kRunBits && ahead == 0) {
    const int next = packets_->NextPacketTnt();
    if (next >= 0) {
      answers = answers << 1 | static_cast<uint64_t>(next);
      ++bits;
    }
  }
  if (bits < 2) {
    if (returns_first) NoReturnRun(node);
    return Walk(node, block);
  }
  const auto key = static_cast<uint32_t>((uint64_t{1} << bits) | answers);
  if (!run_heads_) {
    static_assert(std::is_trivially_copyable_v<RunHead> && std::is_aggregate_v<RunHead>);
    static_assert(std::is_trivially_copyable_v<RunBody> && std::is_aggregate_v<RunBody>);
    run_heads_.reset(static_cast<RunHead*>(
        std::aligned_alloc(alignof(RunHead), kTntRunSlots * sizeof(RunHead))));
    run_bodies_.reset(static_cast<RunBody*>(
        std::aligned_alloc(alignof(RunBody), kTntRunSlots * sizeof(RunBody))));
    if (!run_heads_ || !run_bodies_) throw std::bad_alloc();
    std::memset(static_cast<void*>(run_heads_.get()), 0, kTntRunSlots * sizeof(RunHead));
  }
  // Two choices: the run is looked for in two slots picked by two hashes, and made in the one
  // used less lately. (Not a pair of neighbours: three runs used in turn whose hashes pick the
  // same pair would take each other's slots at each lookup, and which runs do follows the nodes'
  // addresses, so one build of the same source made runs 8,840 times on synth 60 M where the
  // next made them 375 times. With two hashes, a run whose two slots are taken evicts one, which
  // goes to its other one, free at the memo's load.)
  const uint64_t hash = (reinterpret_cast<uintptr_t>(&node) >> 4) ^ (key * 0x9e37u) ^
                        (returns_first ? returns_to * 0x9e3779b1u : 0);
  size_t slot = hash % kTntRunSlots;
  auto holds = [&](size_t s) {
    return run_heads_[s].node == &node && run_heads_[s].key == key &&
           (!returns_first || run_bodies_[s].returns_to == returns_to);
  };
  RunHead* found = &run_heads_[slot];
  if (!holds(slot)) {
    const size_t other_slot = (hash * 0x9e3779b97f4a7c15u) >> (64 - kTntRunSlotBits);
    RunHead* other = &run_heads_[other_slot];
    if (holds(other_slot)) {
      found = other;
      slot = other_slot;
    } else {
      // (Wrapping: `used` then picks a slot less well for one lookup, no worse.)
      if (static_cast<int32_t>(other->used - found->used) < 0) {
        found = other;
        slot = other_slot;
      }
      MakeRun(*found, run_bodies_[slot], node, key, bits, returns_to);
    }
  }
  RunHead& run = *found;
  run.used = ++runs_looked_up_;
  if (returns_first) {
    if (run.blocks >= 2) {
      if (node.return_runs < kTryReturnRuns + 64) ++node.return_runs;
    } else {
      NoReturnRun(node);
    }
  }
  if (run.blocks < 2 || run.head_ninsn > run_room_) return Walk(node, block);
  // A loop (RunHead::loops) whose answers all come from this packet: while the next answers are
  // the key's again, the same run again (all of them cached).
  uint32_t repeat = 1;
  if (run.loops && bits <= left) {
    const uint64_t answers = key & ((uint32_t{1} << bits) - 1);
    while ((repeat + 1) * static_cast<uint32_t>(bits) <= static_cast<uint32_t>(left) &&
           packets_->PeekTnt(bits, static_cast<int>(repeat) * bits) == answers &&
           uint64_t{repeat} * run.ninsn + run.head_ninsn <= run_room_) {
      ++repeat;
    }
  }
  packets_->GetOffset(&run_offset_);
  // The answers of all but the last block at once; the last one's as Walk takes it.
  // All the cached answers where the last block takes the next packet's first.
  const int skip = static_cast<int>(run.answers * repeat) - 1;
  RunBody& body = run_bodies_[slot];
  run_tail_ninsn_ = run.ninsn - run.head_ninsn;
  if (skip > left) {
    // The blocks from the one that took the first answer of the last packet cached on ran at
    // the offset after that packet (only the last block, where it takes the next one's first).
    ++ahead_runs_given_;
    const int given = packets_->SkipTntAhead(skip);
    if (packets_->TntLeft() != 0) run_tail_ninsn_ = body.tail_ninsn[skip - given];
  } else {
    // The last block takes the next packet's first answer (a repeated run never does: its
    // answers all come from this packet).
    if (skip == left) ++crossing_runs_given_;
    packets_->SkipTnt(skip);
  }
  if (!run.flat) {
    ++call_runs_given_;
    // As the blocks' calls and returns one by one: where the run's deepest point passes the
    // 64 entries, its pushes forget the oldest (only those from before the run: it is at most
    // kRunBlocks deep); the run leaves its kept pushes on top.
    retstack_.PushKept(body.kept, run.kept_count, run.peak, returns_first);
  }
  walked_ += run.blocks * repeat - 1;
  ++runs_given_;
  given_.blocks = std::span<const pt_block>(body.block, run.blocks);
  given_.memos = std::span<BlockMemo* const>(body.memos, run.blocks);
  given_.repeat = repeat;
  given_.ninsn = uint64_t{run.ninsn} * repeat;
  given_.memo = &run.memo;
  run_given_ = &given_;
  ip_ = run.last->ip;
  block->ip = ip_;
  return Walk(*run.last, block);
}

int FastBlockDecoder::Next(pt_block* block) {
  std::memset(block, 0, sizeof(*block));
  block->ip = ip_;
  block->mode = mode_;
  // pt_insn_next wants tracing enabled before it looks at the trace (an enable comes as an
  // event, taken before): pt_blk_next proceeds to the next event instead, which, where a
  // damaged trace has a second TIP.PGD, decodes on from the first one's resume IP.
  if (insn_binding_ && !enabled_) return (status_ & pts_eos) != 0 ? -pte_eos : -pte_no_enable;
  if (!walk_) return Proceed(block);
  walked_last_ = false;
  run_given_ = nullptr;
  if (walk_ready_ && enabled_ && !process_event_ && !(status_ & pts_event_pending)) {
    Node* node = walk_next_;
    if (node == nullptr || node->ip != ip_ || node->mode != mode_) {
      if (!graph_->node_slots) {
        graph_->node_slots = std::make_unique<Graph::NodeSlot[]>(kRunSlots);  // zeroed
      }
      Graph::NodeSlot& slot = graph_->node_slots[(ip_ ^ (ip_ >> 13)) % kRunSlots];
      if (slot.node != nullptr && slot.ip == ip_ && slot.mode == mode_) {
        node = slot.node;
      } else {
        node = NodeAt(ip_, mode_);
        slot = {ip_, mode_, node};
      }
      if (walk_link_ != nullptr) *walk_link_ = node;
    }
    if (node->ninsn != 0) {
      walked_last_ = true;
      if (runs_ && (!node->query || node->last.iclass == ptic_cond_jump)) {
        return WalkRun<false>(*node, block);
      }
      // A block ending in a return starts runs once walked kTryReturnRuns times (most of
      // ordinary code's are walked a few times, and their runs' keys and lookups would cost more
      // than their walks), while they come (Node::return_runs).
      if (runs_ && node->last.iclass == ptic_return && node->return_runs >= 0 &&
          retstack_.size() != 0) {
        if (node->return_runs >= kTryReturnRuns) return WalkRun<true>(*node, block);
        ++node->return_runs;
      }
      return Walk(*node, block);
    }
  }
  walk_next_ = nullptr;
  walk_link_ = nullptr;
  const int status = Proceed(block);
  // Whether CanonicalBlocks joins nothing to this block (an event or error flushes it).
  if (status < 0 || (status & pts_event_pending)) {
    walk_ready_ = true;
  } else if (block->ninsn != 0) {
    walk_ready_ = block->iclass == ptic_cond_jump || block->iclass == ptic_return ||
                  block->iclass == ptic_call;
  }
  return status;
}

std::span<const pt_insn> FastBlockDecoder::Insns(const pt_block& block) {
  auto [it, inserted] = graph_->listed.try_emplace(Key{block.ip, block.mode});
  Listed& list = it->second;
  if (inserted) list.next_ip = block.ip;
  // Inside a block the flow needs no trace: each instruction leads to the next by falling
  // through or by a direct jump or call.
  while (list.insns.size() < block.ninsn && list.more) {
    const Insn* insn = nullptr;
    if (Decode(list.next_ip, block.mode, &insn) < 0) {
      list.more = false;
      break;
    }
    pt_insn& out = list.insns.emplace_back();
    std::memset(&out, 0, sizeof(out));
    out.ip = insn->ip;
    out.isid = insn->isid;
    out.mode = insn->mode;
    out.iclass = insn->iclass;
    std::memcpy(out.raw, insn->raw, sizeof(out.raw));
    out.size = insn->size;
    out.truncated = insn->truncated;
    if (NextIp(&list.next_ip, *insn) < 0) list.more = false;
  }
  return std::span<const pt_insn>(list.insns)
      .first(std::min<size_t>(list.insns.size(), block.ninsn));
}

int FastBlockDecoder::Event(pt_event* out) {
  if (!process_event_) return -pte_bad_query;
  pt_event* ev = &event_;
  switch (ev->type) {
    case ptev_enabled:
      if (ev->variant.enabled.ip == ip_) ev->variant.enabled.resumed = 1;
      if (ev->status_update) return -pte_bad_context;
      if (ev->ip_suppressed) return -pte_noip;
      if (enabled_) return -pte_bad_context;
      ip_ = ev->variant.enabled.ip;
      enabled_ = true;
      break;
    case ptev_async_disabled:
      if (ip_ != ev->variant.async_disabled.at) return -pte_bad_query;
      [[fallthrough]];
    case ptev_disabled:
      if (ev->status_update || !enabled_) return -pte_bad_context;
      enabled_ = false;
      break;
    case ptev_async_branch:
      if (ip_ != ev->variant.async_branch.from) return -pte_bad_query;
      if (ev->status_update || !enabled_) return -pte_bad_context;
      ip_ = ev->variant.async_branch.to;
      break;
    case ptev_async_paging:
      if (!ev->ip_suppressed && ip_ != ev->variant.async_paging.ip) return -pte_bad_query;
      break;
    case ptev_paging:
      break;
    case ptev_async_vmcs:
      if (!ev->ip_suppressed && ip_ != ev->variant.async_vmcs.ip) return -pte_bad_query;
      break;
    case ptev_vmcs:
      break;
    case ptev_overflow:
      if (ev->status_update) return -pte_bad_context;
      if (ev->ip_suppressed) {
        enabled_ = false;
        ip_ = 0;
      } else {
        enabled_ = true;
        ip_ = ev->variant.overflow.ip;
      }
      break;
    case ptev_exec_mode: {
      if (!ev->ip_suppressed && ip_ != ev->variant.exec_mode.ip) return -pte_bad_query;
      pt_exec_mode mode = ev->variant.exec_mode.mode;
      if (ev->status_update && enabled_ && mode_ != ptem_unknown && mode_ != mode) {
        return -pte_bad_status_update;
      }
      mode_ = mode;
      break;
    }
    case ptev_tsx:
      if (!ev->ip_suppressed && ip_ != ev->variant.tsx.ip) return -pte_bad_query;
      if (ev->variant.tsx.speculative) return -pte_internal;  // FastPathCovers excludes it
      break;
    case ptev_stop:
      if (ev->status_update || enabled_) return -pte_bad_context;
      break;
    case ptev_exstop:
      if (!ev->ip_suppressed && enabled_ && ip_ != ev->variant.exstop.ip) return -pte_bad_query;
      break;
    case ptev_mwait:
      if (!ev->ip_suppressed && enabled_ && ip_ != ev->variant.mwait.ip) return -pte_bad_query;
      break;
    case ptev_pwre:
    case ptev_pwrx:
    case ptev_ptwrite:
    case ptev_tick:
    case ptev_cbr:
    case ptev_mnt:
      break;
  }
  process_event_ = false;
  *out = *ev;
  return ProceedTrailingEvent();
}

}  // namespace ptkit::decoder
