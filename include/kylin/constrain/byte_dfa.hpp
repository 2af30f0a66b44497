// Byte automata for JSON-schema string keywords (pattern, format, lengths beside them): an NFA
// built from a regex, made deterministic by subset construction (a capped number of states),
// intersected, trimmed of dead ends, then written as grammar rules (one rule per state).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kylin/constrain/grammar.hpp"

namespace kylin::constrain::detail {

struct ByteNfa {
  struct Edge {
    ByteSet set;
    int to;
  };
  std::vector<std::vector<Edge>> edges;  // [n_states]
  std::vector<std::vector<int>> eps;     // [n_states] moves without a byte
  int add_state() {
    edges.emplace_back();
    eps.emplace_back();
    return static_cast<int>(edges.size()) - 1;
  }
  void add_bytes(int from, const std::vector<Element>& seq, int to) {  // a run of byte sets
    int at = from;
    for (std::size_t i = 0; i < seq.size(); ++i) {
      const int next = i + 1 == seq.size() ? to : add_state();
      edges[static_cast<std::size_t>(at)].push_back({seq[i].set, next});
      at = next;
    }
  }
};

struct ByteDfa {
  std::vector<std::array<int, 256>> next;  // [n_states][byte] target state, -1 rejected
  std::vector<char> accept;                // [n_states]
  int add_state(bool accepting) {
    std::array<int, 256> row;
    row.fill(-1);
    next.push_back(row);
    accept.push_back(accepting ? 1 : 0);
    return static_cast<int>(next.size()) - 1;
  }
};

inline Error automaton_error(const std::string& path, const std::string& what, std::size_t max_states) {
  return grammar_error("json schema " + path, what + " needs more than " + std::to_string(max_states) +
                                                  " automaton states; at most that many are compiled per string schema");
}

// Subset construction from `start` to `accept` of the NFA; state 0 is the start. Bytes with the
// same NFA moves (most of a class) share one closure, and closures mark a reused stamp array, so
// a state costs its moves, not the NFA's size per byte.
inline ByteDfa determinize(const ByteNfa& nfa, int start, int accept, std::size_t max_states, const std::string& path,
                           const std::string& what) {
  std::vector<std::uint32_t> mark(nfa.edges.size(), 0);  // [n_nfa_states] stamp of the closure that reached it
  std::uint32_t stamp = 0;
  auto closure = [&](std::vector<int> set) {
    ++stamp;
    for (int s : set) mark[static_cast<std::size_t>(s)] = stamp;
    for (std::size_t i = 0; i < set.size(); ++i)
      for (int t : nfa.eps[static_cast<std::size_t>(set[i])])
        if (mark[static_cast<std::size_t>(t)] != stamp) mark[static_cast<std::size_t>(t)] = stamp, set.push_back(t);
    std::sort(set.begin(), set.end());
    return set;
  };
  ByteDfa dfa;
  std::map<std::vector<int>, int> ids;
  std::vector<std::vector<int>> sets;
  auto intern = [&](std::vector<int> set) {
    auto [it, fresh] = ids.try_emplace(std::move(set), static_cast<int>(sets.size()));
    if (fresh) {
      if (sets.size() >= max_states) throw automaton_error(path, what, max_states);
      sets.push_back(it->first);
      dfa.add_state(std::binary_search(it->first.begin(), it->first.end(), accept));
    }
    return it->second;
  };
  intern(closure({start}));
  for (std::size_t d = 0; d < sets.size(); ++d) {
    std::array<std::vector<int>, 256> moves;  // [byte] NFA states reached
    for (int s : sets[d])
      for (const ByteNfa::Edge& e : nfa.edges[static_cast<std::size_t>(s)])
        for (unsigned b = 0; b < 256; ++b)
          if (e.set.has(static_cast<unsigned char>(b))) moves[b].push_back(e.to);
    std::map<std::vector<int>, int> targets;  // moves -> DFA state, once per distinct move set
    for (unsigned b = 0; b < 256; ++b) {
      if (moves[b].empty()) continue;
      std::sort(moves[b].begin(), moves[b].end());
      moves[b].erase(std::unique(moves[b].begin(), moves[b].end()), moves[b].end());
      auto it = targets.find(moves[b]);
      if (it == targets.end()) it = targets.emplace(moves[b], intern(closure(moves[b]))).first;
      dfa.next[d][b] = it->second;
    }
  }
  return dfa;
}

// The strings both accept; state 0 is the start.
inline ByteDfa intersect(const ByteDfa& a, const ByteDfa& b, std::size_t max_states, const std::string& path,
                         const std::string& what) {
  ByteDfa out;
  std::map<std::pair<int, int>, int> ids;
  std::vector<std::pair<int, int>> pairs;
  auto intern = [&](int x, int y) {
    auto [it, fresh] = ids.try_emplace({x, y}, static_cast<int>(pairs.size()));
    if (fresh) {
      if (pairs.size() >= max_states) throw automaton_error(path, what, max_states);
      pairs.push_back({x, y});
      out.add_state(a.accept[static_cast<std::size_t>(x)] && b.accept[static_cast<std::size_t>(y)]);
    }
    return it->second;
  };
  intern(0, 0);
  for (std::size_t d = 0; d < pairs.size(); ++d)
    for (unsigned c = 0; c < 256; ++c) {
      const int x = a.next[static_cast<std::size_t>(pairs[d].first)][c], y = b.next[static_cast<std::size_t>(pairs[d].second)][c];
      if (x >= 0 && y >= 0) {
        const int t = intern(x, y);
        out.next[d][c] = t;
      }
    }
  return out;
}

// The strings of `dfa` (JSON string content in its canonical encoding) that hold [min, max]
// characters (max < 0: no bound), counted as they complete: a raw ASCII byte, an escape (\n or
// \uXXXX), a UTF-8 sequence. Only the (state, phase, count) triples reachable are built, so a
// pattern of ASCII characters under maxLength n costs about n times its own states; nullopt past
// max_states.
inline std::optional<ByteDfa> with_length(const ByteDfa& dfa, std::size_t min, long long max, std::size_t max_states) {
  // phase: 0 between characters, 1 after a backslash, 2..5 hex digits of \u left + 1, 6..8 UTF-8
  // continuation bytes left + 5
  struct Key {
    int state, phase;
    std::size_t count;
    bool operator<(const Key& o) const { return std::tie(state, phase, count) < std::tie(o.state, o.phase, o.count); }
  };
  ByteDfa out;
  std::map<Key, int> ids;
  std::vector<Key> keys;
  auto intern = [&](Key k) {
    auto [it, fresh] = ids.try_emplace(k, static_cast<int>(keys.size()));
    if (fresh) {
      keys.push_back(k);
      out.add_state(dfa.accept[static_cast<std::size_t>(k.state)] && k.phase == 0 && k.count >= min);
    }
    return it->second;
  };
  intern({0, 0, 0});
  for (std::size_t d = 0; d < keys.size(); ++d)
    for (unsigned b = 0; b < 256; ++b) {
      const Key k = keys[d];
      const int t = dfa.next[static_cast<std::size_t>(k.state)][b];
      if (t < 0) continue;
      int phase = 0;
      if (k.phase == 0) phase = b == '\\' ? 1 : b >= 0xF0 ? 8 : b >= 0xE0 ? 7 : b >= 0xC0 ? 6 : 0;
      else if (k.phase == 1) phase = b == 'u' ? 5 : 0;
      else if (k.phase != 2 && k.phase != 6) phase = k.phase - 1;
      std::size_t count = k.count + (phase == 0 ? 1 : 0);
      if (max >= 0 && count > static_cast<std::size_t>(max)) continue;
      if (max < 0) count = std::min(count, min);  // past min, counts behave alike
      const int to = intern({t, phase, count});
      out.next[d][b] = to;
      if (keys.size() > max_states) return std::nullopt;
    }
  return out;
}

// Removes every move into a state from which no accepting state is reachable, so a constrained
// sampler never enters a dead end. False when the start itself is such a state (no string).
inline bool trim(ByteDfa& dfa) {
  const std::size_t n = dfa.next.size();
  std::vector<std::vector<int>> back(n);  // [n_states] predecessors
  for (std::size_t s = 0; s < n; ++s)
    for (int t : dfa.next[s])
      if (t >= 0) back[static_cast<std::size_t>(t)].push_back(static_cast<int>(s));
  std::vector<char> live(n, 0);
  std::vector<int> todo;
  for (std::size_t s = 0; s < n; ++s)
    if (dfa.accept[s]) live[s] = 1, todo.push_back(static_cast<int>(s));
  while (!todo.empty()) {
    const int t = todo.back();
    todo.pop_back();
    for (int s : back[static_cast<std::size_t>(t)])
      if (!live[static_cast<std::size_t>(s)]) live[static_cast<std::size_t>(s)] = 1, todo.push_back(s);
  }
  for (auto& row : dfa.next)
    for (int& t : row)
      if (t >= 0 && !live[static_cast<std::size_t>(t)]) t = -1;
  return live[0] != 0;
}

// One rule per state reachable from the start: an alternative per target (the bytes leading
// there, then that state's rule) and an empty one where the state accepts. Returns the start's rule.
inline int emit_dfa(GrammarBuilder& b, const ByteDfa& dfa, const std::string& name) {
  std::vector<int> rule(dfa.next.size(), -1);  // [n_states]
  std::vector<int> order{0};
  rule[0] = b.new_rule(name);
  for (std::size_t i = 0; i < order.size(); ++i)
    for (int t : dfa.next[static_cast<std::size_t>(order[i])])
      if (t >= 0 && rule[static_cast<std::size_t>(t)] < 0) rule[static_cast<std::size_t>(t)] = b.new_rule(name), order.push_back(t);
  for (int s : order) {
    std::map<int, ByteSet> by_target;
    for (unsigned c = 0; c < 256; ++c)
      if (const int t = dfa.next[static_cast<std::size_t>(s)][c]; t >= 0) by_target[t].add(static_cast<unsigned char>(c));
    for (const auto& [t, set] : by_target)
      b.add_alt(rule[static_cast<std::size_t>(s)], {Element::byte_set(set), Element::ref(rule[static_cast<std::size_t>(t)])});
    if (dfa.accept[static_cast<std::size_t>(s)]) b.add_alt(rule[static_cast<std::size_t>(s)], {});
  }
  return rule[0];
}

}  // namespace kylin::constrain::detail
