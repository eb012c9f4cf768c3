#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "decoder/flow_sink.h"
#include "decoder/output_format.h"
#include "decoder/sinks.h"

namespace ptkit::decoder {
namespace {

class FoldedSink : public FlowSink {
 public:
  // A chunk's stacks are suffixes of the stack below it, the top frame of B (the stack at the
  // chunk's start, less the frames its returns popped) in each epoch (CallStack::ChunkOp): nodes
  // whose root is "B's top in epoch e", resolved by the merge (--weight=insn only).
  class Chunk : public FlowChunk {
   public:
    Chunk(const ProgramImage& image, FoldedSink& to) : FlowChunk(image, false), to_(to) {}
    void BeginSummary() override {
      FlowChunk::BeginSummary();
      nodes_.clear();  // the head's stacks are the chunk before's
      index_.clear();
      path_.clear();
    }
    bool ApplyTo() override {
      std::vector<uint32_t> map;
      CallStack::ChunkPlan plan;
      if (!to_.ApplyChunkModel(model_, &map, &plan)) return false;
      auto depth = [&](uint32_t epoch) {
        return epoch == 0 ? plan.start_depth : plan.tops[epoch - 1];
      };
      std::vector<uint32_t>& path = to_.path_;
      // Each node's global node and its frame's depth (as FoldedSink::OnEnter places a frame:
      // beyond max_depth_, the "[deeper frames]" node).
      std::vector<uint32_t> global(nodes_.size());
      std::vector<size_t> depths(nodes_.size());
      for (size_t i = 0; i < nodes_.size(); ++i) {
        const LocalNode& n = nodes_[i];
        uint32_t parent;
        size_t parent_depth;
        if (n.parent < 0) {
          parent_depth = depth(static_cast<uint32_t>(-1 - n.parent));
          parent = parent_depth == 0 ? 0 : path[parent_depth - 1];
        } else {
          parent = global[n.parent];
          parent_depth = depths[n.parent];
        }
        const uint32_t f = map[n.function];
        if (n.frame) {
          depths[i] = parent_depth + 1;
          global[i] = to_.FrameNode(parent, f, depths[i]);
          if (n.count != 0) to_.nodes_[to_.CountNode(global[i], f)].count += n.count;
        } else {
          depths[i] = parent_depth;
          global[i] = to_.CountNode(parent, f);
          to_.nodes_[global[i]].count += n.count;
        }
      }
      path.resize(plan.tops.empty() ? plan.start_depth : plan.tops.back());
      for (int64_t node : path_) path.push_back(global[node]);
      to_.top_ = path.empty() ? 0 : path.back();
      return true;
    }

   protected:
    void OnCount(uint32_t function, uint64_t n) override {
      int64_t node;
      if (path_.empty()) {
        node = Node(Root(), function, false);  // B's top, or a child of it
      } else {
        node = path_.back();
        if (nodes_[node].function != function) node = Node(node, function, false);
      }
      nodes_[node].count += n;
    }
    void OnEnter(const Frame& frame) override {
      path_.push_back(Node(path_.empty() ? Root() : path_.back(), frame.function, true));
    }
    void OnRename(uint32_t from, const Frame& frame) override {
      path_.back() =
          Node(path_.size() > 1 ? path_[path_.size() - 2] : Root(), frame.function, true);
    }
    void OnExit(const Frame& frame, bool at_end) override { path_.pop_back(); }

   private:
    // A frame of C, or where the instructions of a function count that runs in the frame
    // of its parent without one of its own (its parent's function's, or one it jumped to: a
    // child of that frame; with no frame of C, B's top, itself if it runs the function): those
    // are one node of the stacks but beyond --max-depth (FoldedSink::FrameNode, CountNode).
    struct LocalNode {
      int64_t parent;  // a node, or -1 - epoch: B's top in that epoch
      uint32_t function;
      bool frame;
      uint64_t count;
    };
    int64_t Root() const { return -1 - static_cast<int64_t>(model_.chunk_epoch()); }
    int64_t Node(int64_t parent, uint32_t function, bool frame) {
      auto [it, inserted] = index_.try_emplace(std::tuple(parent, function, frame), nodes_.size());
      if (inserted) nodes_.push_back({parent, function, frame, 0});
      return static_cast<int64_t>(it->second);
    }
    FoldedSink& to_;
    std::vector<LocalNode> nodes_;  // parents before children
    absl::flat_hash_map<std::tuple<int64_t, uint32_t, bool>, size_t> index_;
    std::vector<int64_t> path_;  // C's frames' nodes
  };
  std::unique_ptr<ChunkSummary> NewChunkSummary(const ProgramImage& image) override {
    if (by_time_) return nullptr;
    return std::make_unique<Chunk>(image, *this);
  }

  FoldedSink(const ProgramImage& image, std::FILE* out, const OutputOptions& options)
      : FlowSink(image),
        out_(out),
        by_time_(options.weight == FoldedWeight::kTime),
        max_depth_(options.max_depth) {
    nodes_.push_back({0, 0, 0});
    wants_time_ = by_time_;
  }
  bool follows_outside_window() const override { return true; }
  // --weight=time: the time outside a --time window is not the window's.
  void OnWindow(bool in) override {
    FlowSink::OnWindow(in);
    ForgetTime();
    ClearInterval();
  }
  // --weight=time: the interval since the last time update ends here.
  void OnTime(uint64_t now) override {
    if (by_time_) {
      if (timed() && now >= tsc()) {
        if (disabled_ && top_ != 0) {
          // No instruction ran: the time is the stack's on top (a system call's wait), not the
          // instructions' before the disable that share the old time (sweep 40a F2). (With no
          // stack yet, as the interval's instructions: it was dropped, and the stacks' times
          // fell short of the threads' spans.)
          nodes_[top_].count += now - tsc();
        } else {
          CloseInterval(now - tsc());
        }
      }
      ClearInterval();
      ever_timed_ = true;
    }
    FlowSink::OnTime(now);
  }
  // The time across an error, another stream or lost trace is not the program's: the open
  // interval is dropped (FlowSink forgets the time on new streams and loss).
  void OnError(const DecodeError& error) override {
    FlowSink::OnError(error);
    ForgetTime();
    ClearInterval();
    disabled_ = false;
  }
  void OnStream(const StreamInfo& stream) override {
    FlowSink::OnStream(stream);
    if (!stream.context_switch) {
      ClearInterval();
      disabled_ = false;
    }
  }
  void OnLoss(const LossInfo& loss) override {
    FlowSink::OnLoss(loss);
    ClearInterval();
    disabled_ = false;
  }
  // From a disable in the kernel (a system call, an interrupt) to the enabled event after it
  // (whose time the decoder tells before the event) the time goes whole to the stack on top.
  void OnEvent(const pt_event& event) override {
    FlowSink::OnEvent(event);
    if (event.type == ptev_disabled || event.type == ptev_async_disabled) {
      disabled_ = model_.stopped_in_kernel();
    } else if (event.type == ptev_enabled) {
      disabled_ = false;
    }
  }

 protected:
  void OnCount(uint32_t function, uint64_t n) override {
    const uint32_t node = CountNode(path_.empty() ? 0 : path_.back(), function);
    top_ = node;
    if (!by_time_) {
      nodes_[node].count += n;
      return;
    }
    if (interval_insns_.size() < nodes_.size()) interval_insns_.resize(nodes_.size());
    if (interval_insns_[node] == 0) touched_.push_back(node);
    interval_insns_[node] += n;
  }
  void OnEnter(const Frame& frame) override {
    path_.push_back(FrameNode(path_.empty() ? 0 : path_.back(), frame.function, path_.size() + 1));
    top_ = path_.back();
  }
  // The frame went on into another function by a jump: the stack is caller;new from here.
  void OnRename(uint32_t from, const Frame& frame) override {
    path_.back() =
        FrameNode(path_.size() > 1 ? path_[path_.size() - 2] : 0, frame.function, path_.size());
    top_ = path_.back();
  }
  void OnExit(const Frame& frame, bool at_end) override {
    path_.pop_back();
    top_ = path_.empty() ? 0 : path_.back();
  }
  absl::Status Report(const DecodeTotals& totals) override {
    if (by_time_ && !ever_timed_) {
      return absl::FailedPreconditionError(
          "folded --weight=time: the trace has no timing packets (TSC, MTC or CYC), so there "
          "is no time to weigh stacks by; record with tsc=1 (ptrecord's default) or use "
          "--weight=insn");
    }
    // The folded format has no comments: the warnings go to stderr.
    if (const std::string warning = model_.DepthWarning(); !warning.empty()) {
      std::fprintf(stderr, "ptdecode: warning: %s\n", warning.c_str());
    }
    if (deepest_ > max_depth_ && max_depth_ != 0) {
      std::fprintf(stderr,
                   "ptdecode: warning: stacks up to %zu frames deep are written with their "
                   "outermost %u frames, one frame [deeper frames] for those above them, and the "
                   "function on top (--max-depth %u; --max-depth 0 writes every frame, a line "
                   "per depth: the output grows with the square of the depth)\n",
                   deepest_, max_depth_, max_depth_);
    }
    WriteLines();
    return out_.Close();
  }

 private:
  struct Node {
    uint32_t parent;
    uint32_t function;
    uint64_t count;
  };
  // Writes every node's path with its own count, one line each (none for a count of 0), in the
  // order of std::sort over (path, count) pairs, in memory O(nodes + the longest line): a path
  // is never held but the one being written (a recursion 65,536 frames deep has gigabytes of
  // them). Nodes whose paths are the same string (two functions of one name, e.g. two static
  // `f`, under one path) are merged into one node of a trie by name, with the counts of all;
  // a depth-first walk of it writes the paths in order, where a node's items are each child's
  // own lines (keyed by its name X) and its descendants' (keyed by "X;"), in the order of their
  // keys as strings: no name holds ';', so no key begins the lines of another key, and
  // "foo.cold" (as any name in which a byte below ';' follows "foo") comes between "foo" and
  // "foo;child", as in a sort of the whole paths.
  void WriteLines() {
    // The names as written (';' is the separator), one per distinct string.
    std::vector<uint32_t> name_of(functions_.size());
    uint32_t deeper_name = 0;  // "[deeper frames]"'s (FrameNode)
    std::vector<std::string> names;
    {
      absl::flat_hash_map<std::string, uint32_t> index;
      for (size_t f = 0; f <= functions_.size(); ++f) {
        std::string name = f < functions_.size() ? functions_[f].name : "[deeper frames]";
        std::replace(name.begin(), name.end(), ';', ':');
        auto [it, inserted] = index.try_emplace(name, static_cast<uint32_t>(names.size()));
        if (inserted) names.push_back(std::move(name));
        if (f < functions_.size()) {
          name_of[f] = it->second;
        } else {
          deeper_name = it->second;
        }
      }
    }
    auto name_index = [&](uint32_t f) { return f == kDeeper ? deeper_name : name_of[f]; };
    // The rank of each key (2 * name: the name; 2 * name + 1: the name and ';') among all.
    std::vector<uint32_t> rank(2 * names.size());
    {
      std::vector<uint32_t> keys(rank.size());
      for (uint32_t k = 0; k < keys.size(); ++k) keys[k] = k;
      auto less = [&](uint32_t a, uint32_t b) {
        const std::string_view x = names[a / 2], y = names[b / 2];
        const size_t n = std::min(x.size(), y.size());
        if (const int c = x.compare(0, n, y.substr(0, n)); c != 0) return c < 0;
        // One name begins the other: the rest, with ';' after a key that has it.
        const std::string_view x_rest = x.substr(n), y_rest = y.substr(n);
        const int xc = !x_rest.empty() ? static_cast<unsigned char>(x_rest[0]) : a % 2 ? ';' : -1;
        const int yc = !y_rest.empty() ? static_cast<unsigned char>(y_rest[0]) : b % 2 ? ';' : -1;
        return xc < yc;
      };
      std::sort(keys.begin(), keys.end(), less);
      for (uint32_t r = 0; r < keys.size(); ++r) rank[keys[r]] = r;
    }
    // The trie by name: merged[i] is node i's node there (0, the root, for the root).
    struct NameNode {
      uint32_t parent;
      uint32_t name;
    };
    std::vector<NameNode> trie = {{0, 0}};
    std::vector<uint32_t> merged(nodes_.size(), 0);
    {
      absl::flat_hash_map<std::pair<uint32_t, uint32_t>, uint32_t> index;
      for (uint32_t i = 1; i < nodes_.size(); ++i) {
        const Node& n = nodes_[i];  // parents come before children
        const NameNode key = {merged[n.parent], name_index(n.function)};
        auto [it, inserted] =
            index.try_emplace(std::pair(key.parent, key.name), static_cast<uint32_t>(trie.size()));
        if (inserted) trie.push_back(key);
        merged[i] = it->second;
      }
    }
    // Each trie node's counts, ascending (equal paths sort by count): counts[first_count[m]..].
    std::vector<std::pair<uint32_t, uint64_t>> counts;
    for (uint32_t i = 1; i < nodes_.size(); ++i) {
      if (nodes_[i].count != 0) counts.emplace_back(merged[i], nodes_[i].count);
    }
    merged = {};
    std::sort(counts.begin(), counts.end());
    std::vector<uint32_t> first_count(trie.size() + 1, 0);
    for (const auto& c : counts) ++first_count[c.first + 1];
    // Each trie node's items, sorted by key: items[first_item[m]..first_item[m + 1]).
    std::vector<uint32_t> children(trie.size(), 0);
    for (uint32_t m = 1; m < trie.size(); ++m) ++children[trie[m].parent];
    std::vector<uint32_t> first_item(trie.size() + 1, 0);
    for (uint32_t m = 1; m < trie.size(); ++m) {
      first_item[trie[m].parent + 1] +=
          (first_count[m + 1] != 0 ? 1 : 0) + (children[m] != 0 ? 1 : 0);
    }
    for (size_t m = 1; m < first_count.size(); ++m) first_count[m] += first_count[m - 1];
    for (size_t m = 1; m < first_item.size(); ++m) first_item[m] += first_item[m - 1];
    struct Item {
      uint32_t rank;
      uint32_t node_kind;  // 2 * trie node, + 1 for its descendants' lines
    };
    std::vector<Item> items(first_item.back());
    {
      std::vector<uint32_t> next(first_item.begin(), first_item.end() - 1);
      for (uint32_t m = 1; m < trie.size(); ++m) {
        const uint32_t key = 2 * trie[m].name;
        if (first_count[m + 1] != first_count[m]) {
          items[next[trie[m].parent]++] = {rank[key], 2 * m};
        }
        if (children[m] != 0) items[next[trie[m].parent]++] = {rank[key + 1], 2 * m + 1};
      }
    }
    children = {};
    rank = {};
    for (uint32_t m = 0; m < trie.size(); ++m) {
      std::sort(items.begin() + first_item[m], items.begin() + first_item[m + 1],
                [](const Item& a, const Item& b) { return a.rank < b.rank; });
    }
    // The walk, without recursion (paths are 65,536 frames deep): one level per frame of the
    // path, with the path's length before it.
    struct Level {
      uint32_t next, end;
      size_t path_size;
    };
    std::vector<Level> levels = {{first_item[0], first_item[1], 0}};
    std::string path;
    while (!levels.empty()) {
      Level& level = levels.back();
      if (level.next == level.end) {
        path.resize(level.path_size);
        levels.pop_back();
        continue;
      }
      const uint32_t m = items[level.next].node_kind / 2;
      const bool descendants = items[level.next].node_kind % 2 != 0;
      ++level.next;
      const size_t size = path.size();
      if (levels.size() > 1) path += ';';
      path += names[trie[m].name];
      if (descendants) {
        levels.push_back({first_item[m], first_item[m + 1], size});
        continue;
      }
      for (uint32_t c = first_count[m]; c < first_count[m + 1]; ++c) {
        fmt::format_to(out_.it(), "{} {}\n", path, counts[c].second);
        out_.MaybeFlush();
      }
      path.resize(size);
    }
  }
  // The node of a frame running `function` at `depth` (1: the outermost) above `parent`'s:
  // beyond max_depth_, the one node "[deeper frames]" above the frame at max_depth_.
  uint32_t FrameNode(uint32_t parent, uint32_t function, size_t depth) {
    deepest_ = std::max(deepest_, depth);
    if (max_depth_ == 0 || depth <= max_depth_) return Child(parent, function);
    return depth == max_depth_ + 1 ? Child(parent, kDeeper) : parent;
  }
  // Where the instructions of `function` count, run in the frame of `frame` (0: none).
  uint32_t CountNode(uint32_t frame, uint32_t function) {
    return frame != 0 && nodes_[frame].function == function ? frame : Child(frame, function);
  }
  uint32_t Child(uint32_t parent, uint32_t function) {
    auto [it, inserted] = children_.try_emplace({parent, function}, 0);
    if (inserted) {
      nodes_.push_back({parent, function, 0});
      it->second = static_cast<uint32_t>(nodes_.size() - 1);
    }
    return it->second;
  }
  // Splits `ticks` over the stacks that ran in the interval, by instructions; the rounding
  // remainder goes to the last one. No instructions: all to the stack on top now.
  void CloseInterval(uint64_t ticks) {
    uint64_t insns = 0;
    for (uint32_t node : touched_) insns += interval_insns_[node];
    if (insns == 0) {
      if (top_ != 0) nodes_[top_].count += ticks;
      return;
    }
    uint64_t given = 0;
    for (uint32_t node : touched_) {
      const auto share = static_cast<uint64_t>(static_cast<unsigned __int128>(ticks) *
                                               interval_insns_[node] / insns);
      nodes_[node].count += share;
      given += share;
    }
    nodes_[touched_.back()].count += ticks - given;
  }
  void ClearInterval() {
    for (uint32_t node : touched_) interval_insns_[node] = 0;
    touched_.clear();
  }

  // The function of the node of the frames beyond max_depth_, named "[deeper frames]".
  static constexpr uint32_t kDeeper = ~uint32_t{0};
  Output out_;
  const bool by_time_;  // --weight=time
  const uint32_t max_depth_;
  size_t deepest_ = 0;  // the most frames a stack had
  bool ever_timed_ = false;
  // Tracing stopped in the kernel (at a system call, an interrupt): no instruction runs.
  bool disabled_ = false;
  uint32_t top_ = 0;                      // the node on top of the stack (0: none)
  std::vector<uint64_t> interval_insns_;  // per node: instructions since the last time update
  std::vector<uint32_t> touched_;         // the nodes with interval_insns_ != 0
  std::vector<Node> nodes_;
  std::vector<uint32_t> path_;
  absl::flat_hash_map<std::pair<uint32_t, uint32_t>, uint32_t> children_;
};

}  // namespace

std::unique_ptr<Sink> MakeFoldedSink(const ProgramImage& image, std::FILE* out,
                                     const OutputOptions& options) {
  return std::make_unique<FoldedSink>(image, out, options);
}

}  // namespace ptkit::decoder
