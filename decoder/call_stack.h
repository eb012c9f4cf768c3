// The call/return model: from the decoder's blocks (ending at calls) and events, the stack of
// frames of the traced thread and per-function instruction counts (self, inclusive, calls).
// stats, calls, folded and timeline are built on it (decoder/flow_sink.h); anything that needs
// call stacks from a decode can use it the same way.
#ifndef PTKIT_DECODER_CALL_STACK_H_
#define PTKIT_DECODER_CALL_STACK_H_

#include <intel-pt.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "decoder/decode.h"
#include "decoder/disassembler.h"
#include "decoder/image.h"
#include "decoder/landing_pads.h"

namespace ptkit::decoder {

// A function as the model knows it: a symbol of an image, code named by its call target
// (no symbol: "sub_ADDRESS"), or the code of a file without a symbol ("[file]").
struct Function {
  std::string name;
  const ProgramImage* image = nullptr;  // whose files() `file` indexes
  int file = -1;                        // index into ProgramImage::files(), -1 unmapped
  uint64_t address = 0;                 // symbol start or call target (0: neither)
  uint64_t self = 0;                    // instructions executed in it
  uint64_t inclusive = 0;               // instructions while it had a frame (or ran)
  uint64_t calls = 0;                   // calls to it
  uint32_t active = 0;                  // frames on the stack
  uint64_t active_since = 0;
  bool from_address = false;  // named by its call target (no symbol)
  // Named by a label inside a function (Symbol::entry false), whose range is [within_start,
  // within_end): flow reaching `address` from code of that function goes on in the frame it
  // runs in (renamed, as perf names the code), no call of it; from other code (a tail jump to
  // an assembly function's second entry) it is one.
  bool label = false;
  uint64_t within_start = 0, within_end = 0;
  // setjmp, sigsetjmp, getcontext (or their PLT entries): a later jump to the return address
  // of a call to it (longjmp) lands in the frame that called it.
  bool returns_twice = false;
  // Go's gogo (runtime.gogo before Go 1.17): a jump out of it may go on on another goroutine's
  // stack.
  bool gogo = false;
  // ucontext's swapcontext and setcontext: the return out of it goes on on the stack it loads.
  bool switches_context = false;
  // Go's runtime.mcall, swapcontext: a call of it gives up its stack; some goroutine or context
  // (which, the trace cannot tell) resumes at the return address of a call to it.
  bool parks = false;
  // Go's runtime.execute: the gogo it calls resumes some goroutine, not the one that ran.
  bool schedules = false;
};

// One frame of the stack: a call seen in the trace, or (implicit) a function entered before
// tracing began. A frame is named after the function running in it, as gdb's and perf's
// stacks name it: the callee, or the function it went on to by a jump (a tail call, a PLT
// entry jumping to its target).
struct Frame {
  uint32_t function = 0;  // index into CallStack::functions(): the function running in it
  uint64_t return_address = 0;
  uint64_t entry_count = 0;  // instructions executed before the call
  bool implicit = false;     // entered before tracing began (no call seen)
  bool signal = false;       // entered by the kernel to run a signal's handler (no call)
  bool entry_timed = false;  // entry_tsc is known
  // The function it ran before the last jump renamed it (kNone: never renamed).
  static constexpr uint32_t kNone = ~uint32_t{0};
  uint32_t renamed_from = kNone;
  // Its last rename went on at the function's first instruction, counted as a call of it.
  bool entered = false;
  // A longjmp landed at setjmp_return since that call: the next one there goes to a frame below
  // that called setjmp since (a TRY/FINALLY chain rethrowing level by level, C cleanup handlers
  // under pthread_exit), if any; else here again (an error loop's one setjmp).
  bool setjmp_landed = false;
  uint64_t entry_tsc = 0;  // the decoder's time at the call
  // The return address of its last call of a Function::returns_twice one (0: none): where a
  // longjmp to this frame lands.
  uint64_t setjmp_return = 0;
};

// Told of every change of a CallStack, as it happens.
class CallStackListener {
 public:
  virtual ~CallStackListener() = default;
  // `n` instructions ran in `function` (in the frame on top of the stack, if any).
  virtual void OnCount(uint32_t function, uint64_t n) {}
  // `frame` was pushed (it is frames().back()).
  virtual void OnEnter(const Frame& frame) {}
  // The frame on top (`frame`, frames().back()) ran `from` and went on into another function
  // by a jump: it is `frame.function`'s now (its entry count and time stay the call's).
  virtual void OnRename(uint32_t from, const Frame& frame) {}
  // The call that pushed `frame` (frames().back()) was no call of its function: a retpoline's
  // call into its own thunk (CallStack::RetpolineReturn). Its count is taken back.
  virtual void OnUncall(const Frame& frame) {}
  // `frame` was popped: by a return (or left without one: a longjmp or an exception jumped
  // to a frame below), or (at_end) because the call context ends (end of the trace, an
  // error, lost trace, another stream).
  virtual void OnExit(const Frame& frame, bool at_end) {}
};

class CallStack {
 public:
  // The most frames kept (about 2.6 MB of them). A call beyond gets no frame: its callee's
  // instructions count in the frame on top, and its return leaves no frame. A program cannot
  // nest deeper with an 8 MiB stack and more than 128 bytes per frame; code that calls
  // itself in a loop (`call .`, hostile input) would otherwise grow the stack without end.
  static constexpr size_t kMaxFrames = size_t{1} << 16;

  struct Totals {
    uint64_t instructions = 0;
    uint64_t calls = 0;           // calls seen (frames pushed, and calls beyond kMaxFrames)
    uint64_t returns = 0;         // frames popped by returns
    uint64_t dropped_frames = 0;  // calls beyond kMaxFrames, given no frame
  };

  // Looks code up in `image` (until SetImage); tells `listener` (may be null) of changes.
  explicit CallStack(const ProgramImage& image, CallStackListener* listener = nullptr)
      : image_(&image), listener_(listener) {}
  CallStack(const CallStack&) = delete;
  CallStack& operator=(const CallStack&) = delete;

  // The flow, in trace order: blocks of the block decoder (with end_block_on_call, so a call
  // ends its block) and its events. Code that runs with no frame (at the start of a stream,
  // after the outermost function returned) gets an implicit frame: the stack holds the
  // function running from its first instruction, and the callers each return reaches. A jump
  // into another function (a block that ends in a jump, or crosses into another function by
  // a direct jump or falling through) renames the frame on top, or returns to the frame below
  // that runs the function jumped into the middle of (longjmp, an exception's landing pad); a
  // call, a return, tracing enabled or an interrupt does not.
  void OnBlock(const pt_block& block);
  // A walked block (Sink::OnWholeBlock): OnBlock, with what OnBlock looks up of the block's
  // code (the function it runs in, that it stays in it, its call's length) kept in `memo` when
  // its first instruction has a symbol and its last one the same.
  void OnWholeBlock(const pt_block& block, BlockMemo& memo);
  // Walked blocks in a run (Sink::OnWholeRun): OnWholeBlock of each; in one step when each
  // block's memo names the same function (or the same file's code without a symbol) from its
  // first instruction to its last and ends in a conditional branch; else, when each names one
  // function (or file) and the run goes into another only by its calls and returns, by the
  // run's program (RunProgram). `run.memo` keeps which.
  void OnWholeRun(const WalkedRun& run);
  void OnEvent(const pt_event& event);
  // The decoder's time (TSC units); frames pushed from now on carry it.
  void OnTime(uint64_t tsc) {
    tsc_ = tsc;
    timed_ = true;
  }
  // The time is unknown until the next OnTime (another decoder, lost trace).
  void ForgetTime() { timed_ = false; }
  // The call context is unknown from here (an error, lost trace, another stream, the end):
  // every frame is popped (at_end).
  void Reset();
  // Code is looked up in `image` from now on (another process's stream). Functions and their
  // counts are kept, per image. With `same_program` (the program goes on with other code
  // mapped over some of its code: Sink::OnImage), a function whose code is the same in both
  // images (the same file, start and name) stays one function, so that the frames on the
  // stack go on counting as they were.
  void SetImage(const ProgramImage& image, bool same_program = false);
  // Whether the listener is told of counts (OnCount, once per block; yes unless told not):
  // for a listener that does nothing on them.
  void set_tell_counts(bool on) { count_listener_ = on ? listener_ : nullptr; }
  // Off: the stack follows the flow (frames entered and left, listeners' OnEnter/OnExit) and
  // nothing is counted: no instructions (so no inclusive ones either), calls or returns, no
  // OnCount (`--time` outside its window: Sink::OnWindow).
  void set_counting(bool on) { counting_ = on; }

  const std::vector<Function>& functions() const { return functions_; }
  const std::vector<Frame>& frames() const { return frames_; }
  const Totals& totals() const { return totals_; }
  bool timed() const { return timed_; }
  uint64_t tsc() const { return tsc_; }
  // Tracing stopped at a system call or an interrupt and has not resumed: none of the
  // program's code runs meanwhile (the thread waits, or the kernel works for it), unlike after
  // a call, jump or return into untraced code.
  bool stopped_in_kernel() const { return disabled_ && disabled_far_; }
  // The warning to show when frames were dropped (totals().dropped_frames), else "".
  std::string DepthWarning() const;

  // Parallel decoding (decoder/parallel_decode.h): a chunk of the trace modelled on a worker
  // thread, without the stack the decode before it left, then applied to the serial model.
  //
  // BeginChunk(): from here on the frames are only those pushed since (C), above an unknown
  // base B (the serial stack at this point); counts, totals and frames start at zero, the
  // state the next block depends on (a pending call or return, the function running) is kept
  // as the blocks before (the chunk's head) left it. A return past C pops B frames the merge
  // finds: it is recorded (ChunkOp) and starts a new epoch, so B only shrinks, and C is empty at
  // each epoch's start. A function's inclusive count here is what it gets from C's frames and
  // its own instructions; while it has a frame in B it gets every instruction, which the merge
  // adds from `inclusive` when its last B frame was popped (EpochEntry). What depends on B in
  // another way is either assumed and checked by the merge (B not empty; a function jumped into
  // has no frame in B; no frame of B returns where tracing was enabled over frames of C, after
  // a system call say; the depth; the time the head left is the serial model's) or not modelled
  // (chunk_failed(): a lookup that names code by the frame on top of B, a jump with no frame of
  // C; the caller then gives the serial model the chunk's blocks instead). A model given nothing
  // before BeginChunk (a stream's first chunk, whose serial model was just Reset) takes B as empty
  // instead, as the serial model would (implicit frames, unmatched returns); the merge checks that
  // it is.
  void BeginChunk();
  bool chunk_failed() const { return failed_; }
  // Chunk mode: whether `function` is code named by B's top (Unnamed with no frame of C), whose
  // name only the merge knows.
  bool named_by_base(uint32_t function) const {
    return keys_[function].kind == FunctionKey::kBaseTop;
  }
  // Chunk mode: the epoch (ChunkOps so far); C is empty at each epoch's start.
  uint32_t chunk_epoch() const { return epoch_; }

  // How a chunk applies to this model (CheckChunk): for each of its ChunkOps, the stack size
  // after it; and the function of this model for each of the chunk's.
  struct ChunkPlan {
    std::vector<size_t> tops;
    size_t start_depth = 0;
    // The size of B in `epoch` (after that many ChunkOps).
    size_t DepthIn(uint32_t epoch) const { return epoch == 0 ? start_depth : tops[epoch - 1]; }
  };
  // Whether `chunk` (a model that called BeginChunk and was given a chunk's records) applies to
  // this model's state, which must be the state at that chunk's BeginChunk: false when an
  // assumption of the chunk does not hold here, or the chunk failed.
  bool CheckChunk(const CallStack& chunk, ChunkPlan& plan) const;
  // False while no chunk applies whatever it holds (CheckChunk): calls beyond kMaxFrames are
  // open (a chunk does not model them).
  bool chunks_apply() const { return beyond_ == 0; }
  // This model as if it had been given the chunk's records (listeners are not told); after
  // CheckChunk said yes. Returns this model's function for each of the chunk's (kNoFunction for
  // one that counted nothing there and that this model does not have).
  std::vector<uint32_t> ApplyChunk(const CallStack& chunk, const ChunkPlan& plan);
  static constexpr uint32_t kNoFunction = ~uint32_t{0};
  // A chunk's returns past its start (and stack resets), in order.
  struct ChunkOp {
    enum Kind : uint8_t {
      kReturn,         // a return to `target`: B's frames down to the one that expects it (else as
                       // ReturnUnmatched when `returning` is set)
      kReturnIfFound,  // tracing enabled at `target`: as kReturn when a frame expects it
      kClear,          // the call context ended (Reset, overflow): every frame
    };
    Kind kind;
    uint64_t target;
    uint64_t at;  // the chunk's instructions before it
    // kReturn with C empty: the function returning (current_), for a return no frame expects
    // (ReturnUnmatched; -2: none ran yet); -1: C had frames, a frame of B must expect it.
    int64_t returning;
    // The time then (tsc() when timed): what B's frames it pops ran for.
    uint64_t tsc;
    bool timed;
  };
  const std::vector<ChunkOp>& chunk_ops() const { return ops_; }

 private:
  // What names a function (its lookup key, independent of the order of creation).
  struct FunctionKey {
    // kBaseTop (chunk mode): code without a symbol run with no frame of C, which the frame on
    // top of B in an epoch names (Unnamed): resolved by the merge (BaseTopFunction).
    enum Kind : uint8_t { kSymbol, kUnknown, kAddress, kUntraced, kBaseTop } kind;
    int64_t value;  // symbol index, file index, call target; kBaseTop: epoch << 32 | file
    bool operator==(const FunctionKey&) const = default;
  };
  uint32_t NewFunction(std::string name, int file, uint64_t address, bool from_address,
                       FunctionKey key);
  uint32_t FunctionFor(const FunctionKey& key);
  // What OnBlock looks up of a block, known (OnWholeBlock's memo): the function it runs in
  // from its first instruction to its last (`by_stack`: none of its code has a symbol, and
  // Unnamed(file) names it at each run), and the length of its call.
  struct Facts {
    uint32_t function;
    uint8_t call_length;
    bool by_stack = false;
    int file = -1;
  };
  // OnBlock, with `facts` when kFacts (else looked up); `ninsn`: block.ninsn, or (kFacts) the
  // instructions of a run of blocks in the function of `facts`, of which `block` is the first.
  template <bool kFacts>
  void Step(const pt_block& block, Facts facts, uint64_t ninsn);
  template <bool kFacts>
  void Arrive(const pt_block& block, Facts facts);
  void Place(uint32_t f, uint64_t ip, bool jumped);
  // The memo of `block` (BlockMemo::value): 0 when its facts are not fixed, else 1, 2 when
  // named by the stack, the call's length << 8 and the function (or the file) << 32.
  uint64_t MemoOf(const pt_block& block);
  // What the steps of a run's blocks do after its first block's (OnWholeRun), made once per run:
  // the calls and returns between them and the instructions each function runs, in order. Made
  // where every block's memo names its function (or its file's code without a symbol) and a
  // block after a conditional branch runs in the function of the one before (no jump into
  // another function): then each block's step places nothing, and the stack changes only by
  // the run's calls and returns.
  // A block after a call or a return and the blocks after it in its function: how it is
  // reached (the call entering `function` and returning to `address`, or the return to
  // `address`) and the instructions they run. Code without a symbol (`by_stack`) runs in the
  // function Unnamed(file) names after the call or the return, as its blocks' steps have it.
  struct RunOp {
    bool call;
    bool by_stack;
    uint32_t function;
    uint32_t file;
    uint64_t address;
    uint64_t ninsn;
  };
  static constexpr size_t kRunOps = 16;
  static constexpr size_t kMaxPrograms = 8192;
  // What the ops add to one function where the stack is beyond kMaxFrames (RunProgram::deep):
  // its calls and the instructions it runs.
  struct RunSum {
    uint32_t function;
    uint32_t calls;
    uint64_t ninsn;
  };
  struct RunProgram {
    Facts first;           // the first block's
    uint64_t first_ninsn;  // its instructions and those of the blocks after it in its function
    uint32_t size;         // of ops
    // The state the last block leaves (Step's end): pending a call or a return, or flowing on;
    // the return address of the run's last call (sets_address: it has one).
    bool pending_call, pending_return, flowing, sets_address;
    // The first block and every op name their functions (none by_stack): while the stack is
    // beyond kMaxFrames by more than its returns, a call only counts and a return only takes
    // back a call given no frame, so the ops come to `sums` (RunDeep): `calls` and `returns` in
    // all, the last op's function on top.
    bool deep;
    uint8_t calls, returns, nsums;
    uint64_t pending_return_address;
    RunOp ops[kRunOps];
    uint32_t last_function;
    uint64_t ninsn;  // of all the ops
    RunSum sums[kRunOps];
  };
  // The run's memo value (OnWholeRun): 0 (each block's step), its first memo's (one function)
  // or 4 | the index of its program in programs_ << 32.
  uint64_t RunMemoOf(const WalkedRun& run);
  // OnWholeRun but for its common case (out of line, so that the common case saves no
  // registers).
  void RunStepped(const WalkedRun& run);
  void RunOps(const RunProgram& program);
  // RunOps where every op only counts (RunProgram::deep, beyond_ above its returns).
  void RunDeep(const RunProgram& program);
  // Whether RunDeep may take `program` with `returns` returns to come before it runs out of
  // calls given no frame: a program of counts only, beyond kMaxFrames, counting for no chunk
  // and no listener.
  bool RunsDeep(const RunProgram& program, uint64_t returns) const {
    return beyond_ > returns && program.deep && frames_.size() >= kMaxFrames && counting_ &&
           !chunk_ && count_listener_ == nullptr;
  }
  bool DeepArrival(const pt_block& block, const RunProgram& program);
  void RunLeaves(const RunProgram& program);
  int64_t FindFunction(const FunctionKey& key) const;
  uint32_t AddressFunction(uint64_t ip);
  // Chunk mode: `f` is about to change (count, frame) in this epoch.
  void Touch(uint32_t f);
  void Underflow(ChunkOp::Kind kind, uint64_t target, int64_t returning = -1);
  uint32_t SymbolFunction(int s);
  uint32_t Unknown(int file);
  uint32_t Untraced();
  uint32_t CallTarget(uint64_t ip);
  uint32_t FunctionAt(uint64_t ip);
  // The first file of `file`'s name (ProgramImage::FirstOfName), or `file` when < 0: the file
  // code without a symbol is named by.
  int OneFile(int file) const;
  // FunctionAt of an address without a symbol, in `file` (OneFile's): the function of the frame on
  // top when that was named by its address in the same file, else Unknown(file). Chunk mode, with
  // no frame of C: BaseTop(file), which the merge resolves.
  uint32_t Unnamed(int file);
  // The frame a jump into the middle of `f` at `ip` lands in: the one that called setjmp
  // returning there (a longjmp), else the innermost one whose call's call site has `ip` as its
  // landing pad (an exception), else f's innermost one; frames_.size() when none. Chunk mode:
  // sets failed_ where the frame may be one of B's.
  size_t LandingFrame(uint32_t f, uint64_t ip);
  // Whether `frame` runs `f` as the stack names code: f itself, or, for code without a symbol
  // (Unknown's), a frame named by its call target in the same file (Unnamed names it so).
  bool RunsIn(const Frame& frame, uint32_t f) const;
  // Whether the instruction before `ip` is a direct call of a function that `is`.
  bool AfterCallOf(uint64_t ip, bool Function::*is);
  // Whether the bytes before `ip` look like a call (direct, through the GOT or a register, or
  // [register + displacement]): where a setjmp may return. May say so of other bytes.
  bool AfterSomeCall(uint64_t ip);
  // Control left Go's gogo or a context switch for another stack: every frame is left (the
  // call context ends there, as when trace is lost); the code after gets implicit frames.
  void LeaveStack();
  // Whether the frame below the top is a Function::schedules one's (chunk mode, where it may
  // be B's: failed).
  bool Scheduled();
  // Whether current_, a function named gogo, is Go's (jumped to from runtime.gogo.abi0).
  bool InGoGogo();
  // A return out of swapcontext or setcontext to `target`: to where getcontext returned, the
  // frames above the one that called it are left; elsewhere (another context) every frame is
  // left. False: an ordinary return (getcontext's frame is gone). Chunk mode: failed where a
  // frame of B may be the one.
  bool ContextReturn(uint64_t target);
  uint32_t BaseTop(int file);
  // The function of this model that a chunk's kBaseTop key names where B is its frames below
  // `depth` (Unnamed's answer with those frames); -1: Unknown(file), not made yet.
  int64_t BaseTopFunction(const FunctionKey& key, size_t depth) const;
  uint64_t CallLength(uint64_t ip, pt_exec_mode mode);
  void Count(uint32_t f, uint64_t n);
  void CountSplit(const pt_block& block, uint32_t first);
  // The instruction after the one at `ip` in a block (its direct jump followed); 0: unreadable.
  uint64_t NextInBlock(uint64_t ip, pt_exec_mode mode);
  // Whether a block whose first and last instructions have no symbol runs code with one, or
  // in another file, between them (stripped code tail-jumping to an exported wrapper that
  // tail-jumps on into stripped code: sweep 35a F2, the wrapper was never entered). Walks it;
  // the memo's version once per block.
  bool PassesOtherCode(const pt_block& block);
  bool PassesOtherCodeMemo(const pt_block& block);
  void Jump(uint32_t f, uint64_t ip);
  void Enter(uint32_t f, uint64_t return_address, bool implicit, bool signal = false);
  void Pop(bool at_end, bool by_return = true);
  // `must`: a return (a frame of B expects it when none of C does, in chunk mode).
  bool ReturnMatched(uint64_t target, bool must);
  // Tracing enabled at `ip` after a call into untraced code, returning to no frame: at a
  // function's entry, the untraced code called it (a callback, a recursion across the filter
  // regions' edge): a frame of its own, no call counted; in the middle of a function that has
  // a frame below the top (a longjmp or an exception out of the untraced code) it ends the
  // frames above that one, as Jump does.
  void EnabledInto(uint64_t ip);
  // Tracing enabled at `ip`, not where it was disabled: a signal's handler entered, or left by
  // rt_sigreturn; false: neither (or chunk mode cannot tell: failed).
  bool SignalTransfer(uint64_t ip);
  bool SignalReturnsAt(uint64_t ip);
  void LeaveSignal();
  void Return(uint64_t target);
  bool IsRetpolineReturn(uint64_t ret_ip) const;
  bool RetpolineReturn(uint64_t target);
  // Whether the return at `ret_ip` is `ret $imm16` (0xc2), as i386 ld.so's
  // _dl_runtime_resolve enters a lazily bound function: see ResolverReturn.
  bool IsRetImmReturn(uint64_t ret_ip) const;
  bool ResolverReturn(uint64_t target);
  void FellInto(uint32_t f, uint64_t ip);
  void ReturnUnmatched();

  const ProgramImage* image_;  // of the current stream
  CallStackListener* listener_;
  CallStackListener* count_listener_ = listener_;  // listener_, or null (set_tell_counts)
  bool counting_ = true;                           // set_counting
  // Its memos' owner (OnWholeBlock): a model made where another was has other functions.
  // (Renewed when the programs of runs are forgotten: every memo is made again.)
  uint64_t memo_owner_ = NewBlockMemoOwner();
  std::vector<Function> functions_;
  std::vector<Frame> frames_;
  LandingPads landing_pads_;  // LandingFrame's, read when an exception lands
  Totals totals_;
  bool timed_ = false;  // tsc_ is the decoder's current time
  uint64_t tsc_ = 0;

  Disassembler disasm_;
  using Key = std::pair<const ProgramImage*, int64_t>;
  using AddressKey = std::pair<const ProgramImage*, uint64_t>;
  absl::flat_hash_map<Key, uint32_t> symbol_function_;          // (image, symbol index)
  absl::flat_hash_map<Key, uint32_t> unknown_function_;         // (image, file index)
  absl::flat_hash_map<AddressKey, uint32_t> address_function_;  // (image, call target)
  absl::flat_hash_map<AddressKey, uint8_t> call_length_;        // (image, call site)
  // SetImage's `same_program`: each image -> the one it followed. The function already made
  // for the same code in one of those, or -1 (SymbolFunction, AddressFunction, Unknown).
  absl::flat_hash_map<const ProgramImage*, const ProgramImage*> followed_;
  int64_t CarriedSymbol(const Symbol& sym) const;
  int64_t CarriedAddress(uint64_t ip) const;
  int64_t CarriedUnknown(int file) const;
  // CountSplit's runs (function, instructions) of a block.
  using SplitKey = std::tuple<const ProgramImage*, uint64_t, uint64_t, uint16_t, int>;
  // One function's run inside a split block; `jumped`: entered at `entry` by Jump(); code
  // without a symbol (`by_stack`) is Unnamed(file)'s.
  struct SplitRun {
    uint32_t function;
    uint64_t instructions;
    uint64_t entry;
    bool jumped;
    int file = 0;
    bool by_stack = false;
  };
  absl::flat_hash_map<SplitKey, std::vector<SplitRun>> split_;
  static constexpr size_t kPassesSlots = size_t{1} << 16;
  // PassesOtherCodeMemo's, by the block's ip: its key's hash, the low bit clear if it passes.
  std::vector<uint64_t> passes_other_;
  // The runs' programs, and which one each run memo had (a run made again in the same slot
  // takes its place: as many as the decoders keep runs; at most kMaxPrograms, ~4.5 MB).
  std::vector<RunProgram> programs_;
  absl::flat_hash_map<const BlockMemo*, uint32_t> program_of_;
  uint64_t beyond_ = 0;  // calls without a frame above the top one (depth past kMaxFrames)
  int32_t untraced_ = -1;
  int64_t current_ = -1;  // function of the last instruction counted
  // The last symbol lookup: addresses in cache_ have the same symbol (or none) and file.
  AddressRange cache_{1, 0};
  int cache_symbol_ = -1;
  int cache_file_ = -1;
  uint32_t cache_function_ = 0;
  // The last Unknown: its image, file and function (code without symbols asks it per block).
  const ProgramImage* unknown_image_ = nullptr;
  int unknown_file_ = -1;
  uint32_t unknown_ = 0;
  // The last call targets and call sites (the hash maps behind them), by address. Trivial,
  // so that each array is made zeroed in one memset when first used (an empty slot: image
  // null).
  struct TargetSlot {
    const ProgramImage* image;
    uint64_t ip;
    uint32_t function;
  };
  struct LengthSlot {
    const ProgramImage* image;
    uint64_t ip;
    uint8_t length;
  };
  static constexpr size_t kSlots = 1024;
  std::unique_ptr<TargetSlot[]> target_slots_;
  std::unique_ptr<LengthSlot[]> length_slots_;
  bool pending_call_ = false;
  bool pending_return_ = false;
  // The last block ended in a jump or an instruction that falls through (not a call or
  // return), and no event came after it: the next block is reached by that jump.
  bool flowing_ = false;
  uint64_t pending_return_address_ = 0;
  // The last disable was an interrupt's: tracing that resumes where it stopped returns nowhere.
  bool async_disabled_ = false;
  // The last disable was at a call into untraced code, whose frame is on top.
  bool left_by_call_ = false;
  bool return_matched_ = false;  // the last Return popped to the frame that expected it
  uint64_t return_ip_ = 0;       // the last return's instruction (0: unknown)
  // Tracing is disabled (since the last disable; an interrupt's at disabled_at_).
  bool disabled_ = false;
  bool disabled_far_ = false;  // at an interrupt or a system call (where signals come)
  uint64_t disabled_at_ = 0;
  // disabled_at_ is the system call the last disable came at (the last block's far call's:
  // syscall_at_ until a disable takes it).
  bool disabled_at_syscall_ = false;
  uint64_t syscall_at_ = 0;
  // Signal handlers running (SignalTransfer): where the flow they interrupted resumes, when
  // known (an interrupt's instruction), and the frames below the handler's. Chunk mode: C's.
  struct Signal {
    uint64_t resume;
    bool resume_known;
    size_t depth;
    // resume is the system call the signal came at: the flow resumes there (restarted) or
    // after it (every system call instruction has 2 bytes: syscall, sysenter, int 0x80).
    bool at_syscall = false;
    bool Resumes(uint64_t ip) const {
      return resume_known && (ip == resume || (at_syscall && ip == resume + 2));
    }
  };
  std::vector<Signal> signals_;
  // Code without a symbol entered as a signal's handler (SignalTransfer), by image.
  absl::flat_hash_set<std::pair<const ProgramImage*, uint64_t>> unnamed_handlers_;

  std::vector<FunctionKey> keys_;                             // per function
  absl::flat_hash_map<int64_t, uint32_t> base_top_function_;  // kBaseTop key value -> function
  int64_t base_top_value_ = -1;  // BaseTop's last key value (none: -1) and its function
  uint32_t base_top_ = 0;
  // Chunk mode (BeginChunk).
  bool chunk_ = false;
  bool base_ = false;  // frames_ are above an unknown base (no kClear yet)
  bool failed_ = false;
  uint32_t epoch_ = 0;
  std::vector<uint32_t> epoch_of_;  // per function: the last epoch it changed in
  struct EpochEntry {
    uint32_t function;
    uint32_t epoch;
    uint64_t inclusive;  // at its first change in `epoch` (C is empty at an epoch's start)
  };
  std::vector<EpochEntry> entries_;
  std::vector<ChunkOp> ops_;
  int64_t nonempty_epoch_ = -1;  // the last epoch whose code ran with no frame of C
  struct Absent {
    uint32_t function;
    uint32_t epoch;
  };
  std::vector<Absent> absent_;  // jumped into (not its entry): no frame of B in that epoch
  struct Unexpected {
    uint64_t target;
    uint32_t epoch;
  };
  // Tracing enabled at `target` over frames of C none of which returns there: no frame of B in
  // that epoch may (the serial model would have unwound to it).
  std::vector<Unexpected> unexpected_;
  // Handlers entered (SignalTransfer) at these addresses with none of C running: no handler of
  // B resumes its flow there. Tracing enabled elsewhere not where it was disabled, with none of C
  // running: no handler of B runs (else that was its return).
  std::vector<uint64_t> base_signal_entries_;
  bool no_base_signal_ = false;
  static constexpr size_t kMaxUnexpected = 4096;  // more: the chunk is decoded again instead
  size_t max_depth_ = 0;                          // of C
  size_t head_functions_ = 0;                     // functions made before BeginChunk
  struct Start {
    bool empty_base;  // B taken as empty (a model given nothing before BeginChunk)
    bool pending_call, pending_return, flowing, async_disabled, left_by_call, disabled,
        disabled_far, timed;
    uint64_t pending_return_address;
    int64_t current;
    uint64_t tsc;  // when timed
  } start_{};
};

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_CALL_STACK_H_
