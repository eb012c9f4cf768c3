#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
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
      std::vector<uint32_t> global(nodes_.size());
      for (size_t i = 0; i < nodes_.size(); ++i) {
        const LocalNode& n = nodes_[i];
        uint32_t parent;
        if (n.parent < 0) {
          const size_t d = depth(static_cast<uint32_t>(-1 - n.parent));
          parent = d == 0 ? 0 : path[d - 1];
        } else {
          parent = global[n.parent];
        }
        const uint32_t f = map[n.function];
        global[i] = n.counted_in_top && parent != 0 && to_.nodes_[parent].function == f
                        ? parent
                        : to_.Child(parent, f);
        to_.nodes_[global[i]].count += n.count;
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
        node = Node(Root(), function, true);  // B's top, or a child of it
      } else {
        node = path_.back();
        if (nodes_[node].function != function) node = Node(node, function, false);
      }
      nodes_[node].count += n;
    }
    void OnEnter(const Frame& frame) override {
      path_.push_back(Node(path_.empty() ? Root() : path_.back(), frame.function, false));
    }
    void OnRename(uint32_t from, const Frame& frame) override {
      path_.back() =
          Node(path_.size() > 1 ? path_[path_.size() - 2] : Root(), frame.function, false);
    }
    void OnExit(const Frame& frame, bool at_end) override { path_.pop_back(); }

   private:
    struct LocalNode {
      int64_t parent;  // a node, or -1 - epoch: B's top in that epoch
      uint32_t function;
      bool counted_in_top;  // a count with no frame of C: B's top's node if it runs the function
      uint64_t count;
    };
    int64_t Root() const { return -1 - static_cast<int64_t>(model_.chunk_epoch()); }
    int64_t Node(int64_t parent, uint32_t function, bool counted_in_top) {
      auto [it, inserted] =
          index_.try_emplace(std::tuple(parent, function, counted_in_top), nodes_.size());
      if (inserted) nodes_.push_back({parent, function, counted_in_top, 0});
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
      : FlowSink(image), out_(out), by_time_(options.weight == FoldedWeight::kTime) {
    nodes_.push_back({0, 0, 0});
    wants_time_ = by_time_;
  }
  // --weight=time: the interval since the last time update ends here.
  void OnTime(uint64_t now) override {
    if (by_time_) {
      if (timed() && now >= tsc()) CloseInterval(now - tsc());
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
  }
  void OnStream(const StreamInfo& stream) override {
    FlowSink::OnStream(stream);
    if (!stream.context_switch) ClearInterval();
  }
  void OnLoss(const LossInfo& loss) override {
    FlowSink::OnLoss(loss);
    ClearInterval();
  }

 protected:
  void OnCount(uint32_t function, uint64_t n) override {
    uint32_t node = path_.empty() ? 0 : path_.back();
    if (node == 0 || nodes_[node].function != function) node = Child(node, function);
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
    path_.push_back(Child(path_.empty() ? 0 : path_.back(), frame.function));
    top_ = path_.back();
  }
  // The frame went on into another function by a jump: the stack is caller;new from here.
  void OnRename(uint32_t from, const Frame& frame) override {
    path_.back() = Child(path_.size() > 1 ? path_[path_.size() - 2] : 0, frame.function);
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
    // The folded format has no comments: the warning goes to stderr.
    if (const std::string warning = model_.DepthWarning(); !warning.empty()) {
      std::fprintf(stderr, "ptdecode: warning: %s\n", warning.c_str());
    }
    // Sorted output: every node's path with its own count.
    std::vector<std::pair<std::string, uint64_t>> lines;
    std::vector<std::string> names(nodes_.size());
    for (uint32_t i = 1; i < nodes_.size(); ++i) {
      const Node& n = nodes_[i];  // parents come before children
      std::string name = functions_[n.function].name;
      std::replace(name.begin(), name.end(), ';', ':');
      names[i] = n.parent == 0 ? name : names[n.parent] + ";" + name;
      if (n.count != 0) lines.emplace_back(names[i], n.count);
    }
    std::sort(lines.begin(), lines.end());
    for (const auto& [path, count] : lines) {
      fmt::format_to(out_.it(), "{} {}\n", path, count);
      out_.MaybeFlush();
    }
    return out_.Close();
  }

 private:
  struct Node {
    uint32_t parent;
    uint32_t function;
    uint64_t count;
  };
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

  Output out_;
  const bool by_time_;  // --weight=time
  bool ever_timed_ = false;
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
