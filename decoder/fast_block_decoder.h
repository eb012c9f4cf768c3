// A block decoder that gives exactly what libipt's pt_blk_* gives (every block with its fields,
// every event, every error), from code decoded once: each instruction is read and decoded once
// per image for the whole run (DecodeInsn, decoder/insn_decode.h: Zydis, classified as libipt's
// pt_ild does, and libipt's own decoding where the two part), a run of code outside
// file sections is walked once, and file sections get libipt's own block cache (pt_bcache: which
// instructions lead to which decision point), kept per section for as long as libipt keeps its
// (the section cache's lifetime), because libipt's block boundaries depend on it. Packets,
// events and their binding come from ptkit's packet loop (decoder/pt_packet_loop.h) or libipt's
// query decoder (pt_qry_*), as in libipt's block decoder, whose logic (pt_block_decoder.c,
// 2.0.5) this follows step by step. The instructions of a block are listed from the same graph
// (Insns), for the outputs that show each instruction.
//
// What it does not model is found before decoding by FastPathCovers(), and such a trace goes to
// libipt: transactions (MODE.TSX with InTX or TXAbort), PTWRITE, PIP or VMCS outside PSB+ (events
// that bind to an instruction), SKL014 with address filters, tick events, packets that do not
// decode. Internal to ptkit_decoder.
#ifndef PTKIT_DECODER_FAST_BLOCK_DECODER_H_
#define PTKIT_DECODER_FAST_BLOCK_DECODER_H_

#include <intel-pt.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "decoder/decode.h"
#include "decoder/disassembler.h"
#include "decoder/image.h"
#include "decoder/pt_packet_loop.h"

namespace ptkit::decoder {

// Whether FastBlockDecoder decodes `pt` (its trace, config and errata) exactly as libipt's
// block decoder (FastPathCoverage, decoder/decode.h): a pass of libipt's packet decoder over the
// whole trace finds none of the packets it does not model, and no packet error (errors go to
// libipt); and whether it can do so with its own packet loop (decoder/pt_packet_loop.h)
// instead of libipt's query decoder.
// `scanned` (if set) is told how far the pass has read, every few MiB (ScanProgress).
FastPathCoverage FastPathCovers(const pt_config& pt, const ScanProgress& scanned = {});
// The same answer from libipt's packet decoder alone (FastPathCovers asks it only when its own
// packet parser meets a packet it does not model, or one that does not read).
FastPathCoverage FastPathCoversByLibipt(const pt_config& pt, const ScanProgress& scanned = {});

class FastBlockDecoder {
 public:
  // The same calls as pt_blk_*; `pt` and its trace must outlive the decoder. Packets are read by
  // PacketLoop with `own_packets` (FastPathCoverage::packets), else by libipt's query decoder.
  // Null when libipt cannot allocate its query decoder.
  static std::unique_ptr<FastBlockDecoder> Create(const pt_config& pt, const ProgramImage& image,
                                                  bool own_packets);
  ~FastBlockDecoder();
  FastBlockDecoder(const FastBlockDecoder&) = delete;
  FastBlockDecoder& operator=(const FastBlockDecoder&) = delete;

  int SyncForward();
  int Next(pt_block* block);
  int Event(pt_event* event);
  int Time(uint64_t* tsc) const {
    return packets_ ? packets_->Time(tsc) : pt_qry_time(qry_, tsc, nullptr, nullptr);
  }
  int GetOffset(uint64_t* offset) const {
    return packets_ ? packets_->GetOffset(offset) : pt_qry_get_offset(qry_, offset);
  }
  int GetSyncOffset(uint64_t* offset) const;
  // Code is read from `image` from now on; its graph is kept apart from other images'.
  void SetImage(const ProgramImage& image);

  // The walk, for a sink that sees the blocks through CanonicalBlocks (decoder/parallel_decode.h)
  // and reads of a block's class only whether it is a call, a return or a far transfer (an
  // indirect jump's block ends in ptic_error or ptic_jump, as libipt's block cache has it): with
  // `on` (and blocks ending at calls, not at jumps), Next gives a whole canonical block (the
  // join of the blocks libipt would give up to the next instruction that needs trace or a call)
  // in one step where the block before ended where CanonicalBlocks joins nothing to it (a
  // conditional branch, a return, a call, an event) and no event is pending: from a node of
  // the graph, decoded once per (IP, mode) for the whole run (instruction count, the
  // instruction that ends it) with links to the nodes its branch went to, the branch's trace
  // queried as libipt does (return compression included). A node is made only where the join
  // is certain: no truncated instruction, no far transfer at the end, at most 65,535
  // instructions, each inner instruction one CanonicalBlocks joins past; elsewhere Next is
  // libipt's step, and CanonicalBlocks joins its blocks as ever. Same sink output, same
  // decoder state after each canonical block. Not the same: where ptkit's own bound of work
  // without trace progress (kErrorLoop, decode.h) trips, since the decode loop checks it per
  // block and libipt's blocks are finer: a trace that loops through direct branches for over
  // 2^20 instructions may end that run one libipt block (up to 65,535 instructions) earlier
  // or later than libipt's decode does.
  void SetWalk(bool on) { walk_ = on && end_on_call_ && !end_on_jump_; }
  // With `on` (and the walk on), Next may give a run of walked blocks in one step (run()): from
  // a block that ends in a conditional branch or a direct call, where two answers or more are
  // to be read, the blocks that the next answers (up to kRunBits: those of the TNT packet being
  // read and, where they are fewer, the next TNT packet's first, which only the run's last
  // block may take) lead through, up to kRunBlocks of them, each ending in a conditional
  // branch, a direct call or a compressed return (all but the last return to a call in the
  // run), looked up in a memo of (node, those answers) made once. The same
  // blocks, decoder state and sink output as walking them one by one (the run's blocks but the
  // last at run_offset, the last at the offset after it: for a sink told positions, the decode
  // loop gives a run one by one where a position is due within it). Only while the
  // instructions of the run's blocks but the last fit in the room set_run_room gives: the
  // decode loop's bound of work without trace progress (kErrorLoop) then trips where it does
  // block by block.
  // A run may also take the answers of the TNT-8 packets that follow the one being read byte
  // for byte (PacketLoop::PeekTntAhead): its blocks then ran at the offsets of the packets they
  // read (run_tail_ninsn), up to the offset set_ahead_limit gives.
  void SetRuns(bool on) { runs_ = on && walk_; }
  // For a sink told positions (the decode loop's limit, less its offset base): a run takes the
  // answers of packets ahead only where they end at this trace offset or before, so that no
  // position is due within it and it is given whole, as its blocks one by one would be told
  // none (chunks of -j: their sinks are told positions; with runs that ended at each packet's
  // end, -j 2's workers stepped 18 % more often than -j 1).
  void set_ahead_limit(uint64_t offset) {
    if (packets_) packets_->SetAheadLimit(offset);
  }
  static constexpr int kRunBits = 8;
  // After a walked Next: the run it gave, of which the block it filled is the last; null when
  // it gave one block.
  const WalkedRun* run() const { return run_given_; }
  // The instructions the decode loop may still take without trace progress (see SetRuns) at
  // the trace offset of its last check: a run's blocks but the last are given only within it.
  void set_run_room(uint64_t insns) { run_room_ = insns; }
  // After run(): the trace offset at which the run's blocks but the last ran (the last one's
  // branch may have read further, as the same block walked alone would: for the decode loop's
  // bound, which counts instructions per offset).
  uint64_t run_offset() const { return run_offset_; }
  // After run(): the instructions of its blocks that ran at the offset after it (the decode
  // loop's bound counts them there): the last block's, or where the run took the answers of
  // TNT-8 packets after the one being read, those of the blocks from the one that took the
  // first answer of the last packet it read.
  uint64_t run_tail_ninsn() const { return run_tail_ninsn_; }
  // Blocks given by the walk since the process started (all decoders; for tests).
  static uint64_t WalkedBlocks();
  // Runs given (SetRuns) since the process started (all decoders; for tests).
  static uint64_t WalkedRuns();
  // Of those, the runs with a call or a return (for tests).
  static uint64_t WalkedCallRuns();
  // Of those, the runs whose last block took the next TNT packet's first answer (for tests).
  static uint64_t WalkedCrossingRuns();
  // Of those, the runs that took the answers of TNT-8 packets after the one being read
  // (for tests).
  static uint64_t WalkedAheadRuns();
  // Whether the last Next walked its block (Sink::OnWholeBlock).
  bool walked() const { return walked_last_; }
  // The memo of the node the last walked block came from (after walked() said yes).
  BlockMemo& memo() { return walked_node_->memo; }

  // Binds a synchronous disable (TIP.PGD) as libipt's instruction decoder does, to the branch
  // that disabled tracing (pt_insn_at_disabled_event), instead of to where its IP is reached
  // (pt_blk_*: code that ran from the disable's IP back to the branch is not in the blocks);
  // and proceeds towards the IP an event binds to (an asynchronous branch or disable, TSX,
  // EXSTOP, MWAIT) as it does, with trace past the branches that need it, where pt_blk_* fails
  // at the first one (a damaged FUP's IP the code never reaches: pte_bad_query).
  // For the instruction outputs, which give what pt_insn_next gives.
  void SetInsnBinding(bool on) { insn_binding_ = on; }

  // The instructions of `block`, a block Next gave (with the image it was decoded from), as
  // libipt's instruction decoder gives them (pt_insn_next; raw holds the instruction's bytes
  // and what follows them): listed once per start IP and mode for the whole run, from the
  // decoded code. Fewer than block.ninsn only if the code cannot be read again.
  std::span<const pt_insn> Insns(const pt_block& block);
  // The IP the decoder stands at: after an error from reading code (pte_nomap, pte_bad_insn),
  // the IP that could not be read.
  uint64_t ip() const { return ip_; }

 private:
  friend struct FastDecoderGraphs;
  // One decoded instruction (pt_insn + the pt_insn_ext bits the block decoder uses).
  struct Insn {
    uint64_t ip = 0;
    int32_t displacement = 0;
    int isid = 0;
    pt_exec_mode mode = ptem_unknown;
    uint8_t size = 0;
    pt_insn_class iclass = ptic_error;
    bool is_direct = false;
    bool changes_cr3 = false;
    bool vmlaunch = false;   // VMLAUNCH or VMRESUME (erratum SKD022)
    bool truncated = false;  // its bytes span two sections (raw holds them)
    uint8_t raw[15] = {};
  };
  // The result of proceeding without trace from an IP on an empty block (the block decoder's
  // no-event path up to the instruction that needs trace), cached per (IP, mode).
  struct Run {
    pt_block block;                // ninsn, end_ip, iclass, isid, truncated/size/raw
    uint64_t next_ip = 0;          // decoder IP after the run
    Insn last;                     // the last instruction reached
    int status = 0;                // 0 (block full, call, jump, section switch) or -pte_bad_query
    std::vector<uint64_t> pushes;  // return addresses the run's calls log
  };
  struct Key {
    uint64_t ip;
    int mode;
    bool operator==(const Key& o) const { return ip == o.ip && mode == o.mode; }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.ip, k.mode);
    }
  };
  struct Listed {
    std::vector<pt_insn> insns;
    uint64_t next_ip = 0;  // after the last one
    bool more = true;      // whether the code after the last one could be read
  };
  // A canonical block from (ip, mode) for the walk; ninsn 0: none from there (see SetWalk).
  struct Node {
    uint64_t ip = 0;
    pt_exec_mode mode = ptem_unknown;
    uint32_t ninsn = 0;
    int isid = 0;
    pt_insn_class iclass = ptic_error;  // the block's class, as libipt's block cache gives it
    bool query = false;                 // the last instruction needs trace
    // A block ending in a return: the times walked up to kTryReturnRuns, then looked up as the
    // first block of runs (RunBody::returns_to), one more for each run given, two fewer for
    // each lookup that gave none (the block returned to ends in no branch a run takes, or the
    // return's answer is the last of its packet, say); below kTryReturnRuns again, -1: no more
    // runs from there.
    int8_t return_runs = 0;
    uint64_t target = 0;  // else it is a direct call: its target
    Insn last;
    // The nodes the last instruction went to: a conditional branch's (not taken, taken), a
    // direct call's target ([0]); null until first taken.
    Node* next[2] = {nullptr, nullptr};
    BlockMemo memo;  // the sink's (memo())
  };
  // A run (SetRuns): from `node`, the answers in `key` (1 << bits | the answers, the first in
  // bit bits - 1) lead through `blocks` blocks, each ending in a conditional branch, a direct
  // call or a compressed return; the last one takes an answer (a conditional branch or a
  // return). Every return but the first and the last blocks' returns from a call in the run:
  // where it goes is known; the first block's, where `node` ends in a return, goes where the
  // return stack's top says, part of the key (RunBody::returns_to). The return stack changes as
  // the blocks walked one by one change it: the pushes and pops of the blocks but the last, in
  // order (the last block's Walk makes its own).
  static constexpr int kRunBlocks = 16;
  static constexpr int8_t kTryReturnRuns = 16;
  // A run's memo is split in two for the cache (s60.data, a 60 M-instruction walk with 4.7 M
  // runs: one 1.3 KB struct per run spread each lookup over ~4 cache lines of a 2.7 MB table
  // that does not fit the 1 MB L2, the tag load after the hash the top sample of the walk):
  // RunHead, one cache line in a dense 128 KB array, holds the tags and all that WalkRun and
  // the sink's common case read (the sink's memo of the run included); RunBody, read only for
  // runs with calls or returns and by sinks that look at the blocks, the rest.
  struct alignas(64) RunHead {
    const Node* node = nullptr;  // null: an empty slot
    Node* last = nullptr;        // the last block's node
    uint32_t key = 0;
    // When last looked up (WalkRun's count, wrapping: it only picks which of two to replace).
    uint32_t used = 0;
    uint32_t ninsn = 0;       // at most kRunBlocks blocks of at most 65,535 instructions
    uint32_t head_ninsn = 0;  // the instructions of its blocks but the last
    uint8_t blocks = 0;       // fewer than 2: no run from there
    uint8_t answers = 0;      // the answers its blocks take
    bool flat = true;         // every block ends in a conditional branch (no push or pop)
    // Flat, taking every answer of its key, and its last branch goes back to `node`: a loop
    // that WalkRun repeats while the next answers are the key's again.
    bool loops = false;
    // What the calls and returns of its blocks but the last do to the return stack (each
    // return takes what a call of the run pushed): RunBody::kept's `kept_count` return
    // addresses pushed, oldest first, the stack at most `peak` entries above where it began.
    uint8_t kept_count = 0;
    uint8_t peak = 0;
    BlockMemo memo;  // WalkedRun::memo
  };
  static_assert(sizeof(RunHead) == 64, "one cache line");
  // WalkRun reads its first line (tail_ninsn, then the first kept pushes) for a run that took
  // the answers of TNT-8 packets after the one being read or that has calls.
  struct alignas(64) RunBody {
    // The instructions of the blocks from the one that took answer i to the last one.
    uint32_t tail_ninsn[kRunBits];
    // Where `node` ends in a compressed return (to a call before the run: it pops the return
    // stack's top before the kept pushes), where it returns (part of the key).
    uint64_t returns_to;
    uint64_t kept[kRunBlocks];
    pt_block block[kRunBlocks];
    BlockMemo* memos[kRunBlocks];
  };
  static constexpr int kTntRunSlotBits = 11;
  static constexpr size_t kTntRunSlots = size_t{1} << kTntRunSlotBits;
  // Trivial, so that the slots are made zeroed in one memset (an empty slot: run null).
  struct RunSlot {
    uint64_t ip;
    pt_exec_mode mode;
    const Run* run;
  };
  static constexpr size_t kRunSlots = 4096;
  struct Graph {
    absl::flat_hash_map<Key, Insn> insns;
    absl::node_hash_map<Key, Run> runs;  // nodes: slots point into it
    // A direct-mapped cache of runs, made when the first run is looked up (most decodes of a
    // short trace, and every one in file sections, look none up).
    std::unique_ptr<RunSlot[]> slots;
    // Insns(): the instructions from an IP on, as far as blocks from there went.
    absl::flat_hash_map<Key, Listed> listed;
    absl::node_hash_map<Key, Node> nodes;  // the walk's: links point into it
    // The last node looked up at each of a few thousand IPs (returns and indirect branches
    // have no link).
    // Trivial and made on first use, as the run slots (an empty slot: node null).
    struct NodeSlot {
      uint64_t ip;
      pt_exec_mode mode;
      Node* node;
    };
    std::unique_ptr<NodeSlot[]> node_slots;
  };
  // libipt's block cache entry (pt_bcache_entry), with its bit-field widths: how many
  // instructions (8 bits) and how far (16 bits) to the next decision point, and what is there.
  enum Qualifier : uint8_t { kDecode, kCond, kAgain, kIndirect, kIndCall, kReturn };
  struct Bce {
    int32_t displacement = 0;  // int16 in libipt
    uint32_t ninsn = 0;        // uint8 in libipt
    pt_exec_mode mode = ptem_unknown;
    Qualifier qualifier = kDecode;
    uint8_t isize = 0;  // 3 bits in libipt: 0 when the instruction is longer than 7 bytes
    // Not in libipt: the instruction at the decision point (libipt decodes it again each
    // time), when known; entries leading to the same decision point share it.
    bool has_point = false;
    uint8_t point_size = 0;
    pt_insn_class point_class = ptic_error;
    bool point_direct = false;
    int32_t point_displacement = 0;
  };
  // libipt's block cache of one section (pt_section's bcache): it lives as long as the
  // section, i.e. as long as the libipt section cache (which keeps every section mapped), and
  // the block boundaries libipt reports depend on it (a direct call ends a block the first
  // time, not once cached). So ptkit keeps one per (section cache, isid), filled the same way.
  struct BlockCache {
    int isid = 0;
    AddressRange range;  // the mapped section
    absl::flat_hash_map<uint64_t, Bce> entries;
  };
  struct SectionCaches;  // the block caches of one libipt section cache
  static std::shared_ptr<SectionCaches> CachesFor(const ProgramImage& image);
  // libipt's pt_retstack: 64 entries, the oldest overwritten. (A ring of a power of two with a
  // count, where libipt's has 65 slots and two indices: the same entries, without the modulo.)
  struct RetStack {
    static constexpr uint32_t kSize = 64;
    uint64_t stack[kSize] = {};
    uint32_t top = 0;    // where the next push goes, modulo kSize (wrapping: 2^32 is a multiple)
    uint32_t count = 0;  // at most kSize
    void Clear() { top = count = 0; }
    void Push(uint64_t ip) {
      stack[top++ % kSize] = ip;
      if (count < kSize) ++count;
    }
    int Pop(uint64_t* ip) {
      if (count == 0) return -pte_retstack_empty;
      --count;
      *ip = stack[--top % kSize];
      return 0;
    }
    int size() const { return static_cast<int>(count); }
    // The top entry, as Pop would give it; false where the stack is empty.
    bool Top(uint64_t* ip) const {
      if (count == 0) return false;
      *ip = stack[(top - 1) % kSize];
      return true;
    }
    // What a run's calls and returns leave (RunHead::kept_count, peak): the `n` return addresses
    // of `kept` pushed, after forgetting the oldest entries that `peak` pushes at once would
    // push out of a full stack.
    // `pop`: the top entry popped first (a run from a return; the stack is not empty).
    void PushKept(const uint64_t* kept, uint32_t n, uint32_t peak, bool pop) {
      if (pop) {
        --top;
        --count;
      }
      count = std::min(count, kSize - peak) + n;
      for (uint32_t k = 0; k < n; ++k) stack[(top + k) % kSize] = kept[k];
      top += n;
    }
  };

  FastBlockDecoder(pt_query_decoder* qry, const pt_config& pt, const ProgramImage& image,
                   bool own_packets);
  int QueryCondBranch(int* taken) {
    return packets_ ? packets_->CondBranch(taken) : pt_qry_cond_branch(qry_, taken);
  }
  int QueryIndirectBranch(uint64_t* ip) {
    return packets_ ? packets_->IndirectBranch(ip) : pt_qry_indirect_branch(qry_, ip);
  }
  void Reset();
  int Status(int flags) const;
  int FetchEvent();
  int Start(int status);
  int Decode(uint64_t ip, pt_exec_mode mode, const Insn** insn);
  int ProceedOneInsn(pt_block* block, Insn* insn, bool log_call = true);
  int ProceedToDisablingInsn(pt_block* block, const pt_event& ev);
  int ProceedToInsn(pt_block* block, Insn* insn, bool (*predicate)(const Insn&));
  int ProceedToIp(pt_block* block, Insn* insn, uint64_t ip);
  int ProceedToIpWithTrace(pt_block* block, uint64_t ip);
  int ProceedToEventIp(pt_block* block, Insn* insn, uint64_t ip);
  int ProceedWithTrace(const Insn& insn);
  int NextIpWithTrace(uint64_t* ip, const Insn& insn);
  int ProceedNoEvent(pt_block* block);
  int ProceedNoEventUncached(pt_block* block);
  int ApplyRun(const Run& run, pt_block* block);
  int ProceedNoEventCached(pt_block* block, BlockCache& bcache);
  int FillCache(pt_block* block, BlockCache& bcache, size_t steps);
  int ProceedTruncated(pt_block* block);
  int DecodeInSection(uint64_t ip, pt_exec_mode mode, const Insn** insn);
  // The block cache of the section at `ip`, null when no file section holds it.
  BlockCache* CacheAt(uint64_t ip) {
    if (last_cache_ != nullptr && ip >= last_cache_->range.begin && ip < last_cache_->range.end) {
      return last_cache_;
    }
    if (ip >= no_section_.begin && ip < no_section_.end) return nullptr;
    return CacheAtSlow(ip);
  }
  BlockCache* CacheAtSlow(uint64_t ip);
  int ProceedEvent(pt_block* block);
  int ProceedTrailingEvent();
  int Proceed(pt_block* block);
  Node* NodeAt(uint64_t ip, pt_exec_mode mode);
  int Walk(Node& node, pt_block* block);
  template <bool kReturnsFirst>
  int WalkRun(Node& node, pt_block* block);
  static void NoReturnRun(Node& node);
  void MakeRun(RunHead& run, RunBody& body, Node& node, uint32_t key, int bits,
               uint64_t returns_to);
  int HandleSkd022(pt_event* ev);
  void LogCall(const Insn& insn);

  pt_query_decoder* qry_;
  std::unique_ptr<PacketLoop> packets_;  // instead of qry_ when set
  const ProgramImage* image_;
  Graph* graph_;
  // The graphs of every image this decoder used (ProgramImage::fast_decoder_graphs), kept while
  // it lives: its memo of runs names their nodes.
  std::vector<std::shared_ptr<FastDecoderGraphs>> graphs_;
  std::shared_ptr<SectionCaches> caches_;  // of image_'s section cache
  BlockCache* last_cache_ = nullptr;       // the section of the last lookup
  AddressRange no_section_{1, 0};          // a mapping of the last lookup that is no section
  Disassembler disasm_;
  bool end_on_call_, end_on_jump_, skd022_;
  bool insn_binding_ = false;
  std::vector<uint64_t>* pushes_ = nullptr;  // while a Run is walked: its logged calls
  bool walk_ = false;
  // The walk's state: the last block ended where CanonicalBlocks joins nothing to it; the
  // node the last walked block's branch went to and the link that names it (null: none).
  bool walk_ready_ = true;
  Node* walk_next_ = nullptr;
  Node** walk_link_ = nullptr;
  uint64_t walked_ = 0;  // blocks walked, added to WalkedBlocks() at the end
  bool walked_last_ = false;
  Node* walked_node_ = nullptr;           // the last walked block's
  bool runs_ = false;                     // SetRuns
  uint64_t run_tail_ninsn_ = 0;           // run_tail_ninsn
  uint64_t ahead_runs_given_ = 0;         // added to WalkedAheadRuns() at the end
  const WalkedRun* run_given_ = nullptr;  // the run the last Next gave (&given_), or null
  WalkedRun given_;                       // what run() gives: the last run's blocks, memos...
  uint64_t run_room_ = 0;                 // set_run_room
  uint64_t run_offset_ = 0;               // run_offset
  uint64_t runs_given_ = 0;               // added to WalkedRuns() at the end
  uint64_t call_runs_given_ = 0;          // added to WalkedCallRuns() at the end
  uint64_t crossing_runs_given_ = 0;      // with ahead_runs_given_, added to WalkedCrossingRuns()
  // SetRuns' memo: a two-way cache of runs by (first node, next answers), made on first
  // use, one for all the graphs (a node is one graph's: a per-CPU trace of many processes
  // would otherwise hold one per process); a run that loses its slot is made again. The heads
  // are cleared (an empty slot: node null); the bodies are not (MakeRun sets what is read of
  // them), so that a short trace does not touch all of their ~2 MiB of pages. Heads and bodies
  // by the same slot number.
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<RunHead[], FreeDeleter> run_heads_;
  std::unique_ptr<RunBody[], FreeDeleter> run_bodies_;
  uint32_t runs_looked_up_ = 0;  // WalkRun's lookups so far (RunHead::used)

  // pt_block_decoder's state.
  pt_exec_mode mode_ = ptem_unknown;
  uint64_t ip_ = 0;
  int status_ = 0;
  bool enabled_ = false;
  bool process_event_ = false;
  pt_event event_{};
  RetStack retstack_;
};

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_FAST_BLOCK_DECODER_H_
