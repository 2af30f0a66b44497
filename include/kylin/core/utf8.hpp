// UTF-8 encoding of one code point: the single encoder shared by the tokenizer (byte-level
// alphabet, NFC output) and the Jinja text helpers.
#pragma once

#include <string>

namespace kylin::detail {

// Appends cp as 1-4 UTF-8 bytes. Callers pass scalar values up to U+10FFFF; a lone surrogate
// gets its 3-byte form (what Python's "surrogatepass" writes), never a silent drop.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace kylin::detail
