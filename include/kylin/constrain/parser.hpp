// The grammar's runtime: a set of parse stacks advanced one byte at a time (a nondeterministic
// pushdown automaton, as llama.cpp's grammar sampler). Stacks are hash-consed into an arena, so a
// state is a sorted list of node ids: cheap to copy during the vocabulary walk, and equal states
// have equal lists, which is what the mask cache keys on.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "kylin/constrain/grammar.hpp"

namespace kylin::constrain {

// Runtime bounds: an ambiguous grammar keeps at most max_stacks parses alive, and nesting deeper
// than max_stack_depth rule frames is not continued (the parse that would need it is dropped).
// One start or step expands at most max_step_nodes nodes (the parses past them are dropped):
// GrammarLimits::max_expansion bounds one stack's expansion, this the sum over the live stacks,
// ~8 ms on an AMD EPYC VM core (256 ambiguous parses each expanding 60,000 nodes took 5.8 s).
struct ParserLimits {
  std::size_t max_stacks = 256;
  int max_stack_depth = 1024;
  std::size_t max_nodes = 1u << 22;  // the arena is rebuilt past this (StackArena::full)
  std::size_t max_step_nodes = 1u << 17;
};

// Node ids: >= 0 a stack whose top is a byte-set element; kAccept the empty stack.
inline constexpr int kAccept = -1;
inline constexpr int kDead = -2;

class StackArena {
 public:
  StackArena(const Grammar& g, ParserLimits limits) : g_(&g), limits_(limits) { clear(); }

  void clear() {
    nodes_.clear();
    seen_.clear();
    table_.assign(1024, -1);
  }
  bool full() const { return nodes_.size() >= limits_.max_nodes; }
  std::size_t size() const { return nodes_.size(); }
  const Grammar& grammar() const { return *g_; }

  // The initial state: every way the root rule can begin.
  void start(std::vector<int>& out) {
    out.clear();
    next_stamp();
    budget_ = limits_.max_step_nodes;
    expand_rule(g_->root, kAccept, out);
    normalize(out);
  }

  // out = the stacks of `in` whose top accepts b, advanced past it. out must not alias in.
  void step(std::span<const int> in, unsigned char b, std::vector<int>& out) {
    out.clear();
    next_stamp();
    budget_ = limits_.max_step_nodes;
    for (int node : in) {
      if (node < 0) continue;
      const Node& n = nodes_[static_cast<std::size_t>(node)];
      if (!g_->elements[static_cast<std::size_t>(n.pos)].set.has(b)) continue;
      expand(next(n.pos, n.parent), out);
    }
    normalize(out);
  }

  static bool accepts(std::span<const int> state) { return !state.empty() && state.front() == kAccept; }

  // A state as plain positions (top first, kAccept closing each stack), to survive clear().
  void save(std::span<const int> state, std::vector<int>& out) const {
    out.clear();
    for (int node : state) {
      for (int n = node; n >= 0; n = nodes_[static_cast<std::size_t>(n)].parent)
        out.push_back(nodes_[static_cast<std::size_t>(n)].pos);
      out.push_back(kAccept);
    }
  }
  void restore(std::span<const int> saved, std::vector<int>& out) {
    out.clear();
    std::vector<int> positions;  // [depth] of one stack, top first
    for (int p : saved) {
      if (p != kAccept) {
        positions.push_back(p);
        continue;
      }
      int node = kAccept;
      for (auto it = positions.rbegin(); it != positions.rend() && node != kDead; ++it) node = push(*it, node);
      if (node != kDead) out.push_back(node);
      positions.clear();
    }
    normalize(out);
  }

 private:
  struct Node {
    int pos;     // element index of the stack's top
    int parent;  // the rest of the stack (kAccept: bottom)
    int depth;
  };

  // The continuation after the element at pos: the next element, or the parent at an alternative's end.
  int next(int pos, int parent) {
    return g_->elements[static_cast<std::size_t>(pos) + 1].kind == Element::Kind::end ? parent : push(pos + 1, parent);
  }

  // Rule references on top are replaced by their alternatives until every top is a byte set.
  void expand(int node, std::vector<int>& out) {
    if (node == kDead) return;
    if (node == kAccept) {
      out.push_back(kAccept);
      return;
    }
    // Each node once per step: nullable rules can reach one node along exponentially many paths.
    if (seen_[static_cast<std::size_t>(node)] == stamp_ || budget_ == 0) return;
    seen_[static_cast<std::size_t>(node)] = stamp_;
    --budget_;
    const Node n = nodes_[static_cast<std::size_t>(node)];
    const Element& e = g_->elements[static_cast<std::size_t>(n.pos)];
    if (e.kind == Element::Kind::bytes) {
      out.push_back(node);
      return;
    }
    expand_rule(e.rule, next(n.pos, n.parent), out);
  }
  void expand_rule(int rule, int cont, std::vector<int>& out) {
    if (cont == kDead) return;
    for (int start : g_->alternatives[static_cast<std::size_t>(rule)])
      if (budget_ > 0) expand(g_->elements[static_cast<std::size_t>(start)].kind == Element::Kind::end ? cont : push(start, cont), out);
  }

  void normalize(std::vector<int>& state) const {
    std::sort(state.begin(), state.end());
    state.erase(std::unique(state.begin(), state.end()), state.end());
    if (state.size() > limits_.max_stacks) state.resize(limits_.max_stacks);
  }

  // Hash-consed: the same (pos, parent) is always the same node.
  int push(int pos, int parent) {
    if (parent == kDead) return kDead;
    const int depth = parent < 0 ? 1 : nodes_[static_cast<std::size_t>(parent)].depth + 1;
    if (depth > limits_.max_stack_depth) return kDead;
    const std::uint64_t key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(pos)) << 32) |
                              static_cast<std::uint32_t>(parent + 1);
    std::size_t mask = table_.size() - 1;
    std::size_t i = hash(key) & mask;
    for (; table_[i] >= 0; i = (i + 1) & mask) {
      const Node& n = nodes_[static_cast<std::size_t>(table_[i])];
      if (n.pos == pos && n.parent == parent) return table_[i];
    }
    nodes_.push_back({pos, parent, depth});
    seen_.push_back(0);
    table_[i] = static_cast<int>(nodes_.size()) - 1;
    if (nodes_.size() * 2 > table_.size()) rehash();
    return static_cast<int>(nodes_.size()) - 1;
  }
  void next_stamp() {
    if (++stamp_ == 0) {  // wrapped: old marks could collide
      std::fill(seen_.begin(), seen_.end(), 0u);
      stamp_ = 1;
    }
  }
  static std::size_t hash(std::uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<std::size_t>(k);
  }
  void rehash() {
    table_.assign(table_.size() * 2, -1);
    const std::size_t mask = table_.size() - 1;
    for (std::size_t id = 0; id < nodes_.size(); ++id) {
      const Node& n = nodes_[id];
      const std::uint64_t key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(n.pos)) << 32) |
                                static_cast<std::uint32_t>(n.parent + 1);
      std::size_t i = hash(key) & mask;
      while (table_[i] >= 0) i = (i + 1) & mask;
      table_[i] = static_cast<int>(id);
    }
  }

  const Grammar* g_;
  ParserLimits limits_;
  std::vector<Node> nodes_;  // [n_nodes]
  std::vector<int> table_;   // [2^k >= 2 n_nodes] open-addressing index of nodes_, -1 empty
  std::vector<std::uint32_t> seen_;  // [n_nodes] stamp of the step that last expanded the node
  std::uint32_t stamp_ = 0;
  std::size_t budget_ = 0;  // nodes the current start or step may still expand
};

// Convenience for tests and one-off checks: does the grammar accept these bytes as a prefix
// (some continuation may complete them) / as a whole?
struct PrefixResult {
  bool viable = false;    // the bytes are a prefix of some sentence
  bool complete = false;  // the bytes are a sentence
};

inline PrefixResult match_bytes(const Grammar& g, std::string_view bytes, ParserLimits limits = {}) {
  StackArena arena(g, limits);
  std::vector<int> a, b;  // [<= max_stacks] states
  arena.start(a);
  for (char c : bytes) {
    arena.step(a, static_cast<unsigned char>(c), b);
    std::swap(a, b);
    if (a.empty()) return {};
  }
  return {!a.empty(), StackArena::accepts(a)};
}

}  // namespace kylin::constrain
