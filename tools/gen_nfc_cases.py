#!/usr/bin/env python3
"""Generates tests/data/reference/qwen3-tokenizer-nfc.jsonl: {"text", "nfc"} pairs from python3's
unicodedata.normalize('NFC'), the oracle for kylin's NFC (the Qwen tokenizer's normalizer).

Cases: every code point with a canonical decomposition, both as itself and as its NFD; every
Hangul LV/LVT pattern from jamo; and random strings of starters, combining marks of many
classes, jamo, singletons and composition exclusions (which need reordering and recomposition).
Run: python3 tools/gen_nfc_cases.py > tests/data/reference/qwen3-tokenizer-nfc.jsonl
"""
import json
import random
import sys
import unicodedata as ud

ALPHABET = (
    list('aeiouAEIOUnNcCsSzZywRqx ') +
    [0x3B1, 0x3B7, 0x3C9, 0x391, 0x415, 0x435, 0x438, 0x423, 0x5D0, 0x627, 0x648, 0x915, 0x924, 0x9C7,
     0xB47, 0xBC6, 0xCC6, 0xD46, 0xDD9, 0x1025, 0x1B05, 0x3046, 0x304B, 0x30AB, 0x30CF] +
    [0x300, 0x301, 0x302, 0x303, 0x304, 0x306, 0x307, 0x308, 0x30A, 0x30B, 0x30C, 0x31B, 0x323, 0x324,
     0x327, 0x328, 0x331, 0x334, 0x338, 0x342, 0x345, 0x5B4, 0x5BC, 0x5C1, 0x64B, 0x650, 0x651, 0x653,
     0x654, 0x655, 0x93C, 0x94D, 0x9BE, 0x9D7, 0xB3E, 0xB56, 0xB57, 0xBBE, 0xBD7, 0xCC2, 0xCD5, 0xCD6,
     0xD3E, 0xD57, 0xDCA, 0xDCF, 0xDDF, 0x102E, 0x1B35, 0x3099, 0x309A, 0x20D2, 0x1D165, 0x1D16E] +
    [0x1100, 0x1101, 0x1112, 0x1161, 0x1175, 0x11A8, 0x11C2, 0xAC00, 0xAC01, 0xD7A3] +
    [0x212B, 0x2126, 0x340, 0x341, 0x343, 0x344, 0x374, 0x37E, 0x387, 0x958, 0xF73, 0xF75, 0xF81,
     0x2ADC, 0x1D15E, 0xFB1D, 0xFB2A, 0xFB01, 0x2460, 0xE9, 0x1FA, 0x1E0D, 0x1E69, 0x1EA0, 0x1F80]
)


def case(text):
    return json.dumps({'text': text, 'nfc': ud.normalize('NFC', text)}, ensure_ascii=False)


def main():
    out = sys.stdout
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        if ud.decomposition(c) and not ud.decomposition(c).startswith('<'):
            out.write(case(c + ' ' + ud.normalize('NFD', c) + ' x' + ud.normalize('NFD', c)[::-1]) + '\n')
    for l in range(0x1100, 0x1113, 3):
        out.write(case(''.join(chr(l) + chr(v) + chr(t) for v in range(0x1161, 0x1176, 4)
                               for t in range(0x11A7, 0x11C3, 5))) + '\n')
    rng = random.Random(20250124)
    for _ in range(4000):
        n = rng.randint(1, 12)
        text = ''.join(c if isinstance(c, str) else chr(c) for c in (rng.choice(ALPHABET) for _ in range(n)))
        out.write(case(text) + '\n')


if __name__ == '__main__':
    main()
