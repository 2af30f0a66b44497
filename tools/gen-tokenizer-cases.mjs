// Generates tests/data/reference/qwen3-tokenizer-extra.jsonl: ids for many more texts from
// @lenml/tokenizers (a transformers.js-derived tokenizer, independent of kylin), so the C++
// tests need no Node. Usage (keep node_modules outside the repo):
//   mkdir -p /tmp/tokgen && (cd /tmp/tokgen && npm install @lenml/tokenizers@3.7.2)
//   TOKGEN_DIR=/tmp/tokgen node tools/gen-tokenizer-cases.mjs > tests/data/reference/qwen3-tokenizer-extra.jsonl
// Each line: {"text", "ids", "variant"}; variant "strip" is the same tokenizer.json with
// <|im_start|> rstrip=true and <|im_end|> lstrip=true, to check HF's lstrip/rstrip.
//
// Left out on purpose, where transformers.js differs from HF tokenizers (Oniguruma regex):
// - U+FEFF and U+0085 next to spaces: JS \s includes U+FEFF and excludes U+0085 (NEL), while
//   Oniguruma's \s is White_Space (U+0085 yes, U+FEFF no).
// - "'ſ": HF's (?i:'s|...) case-folds U+017F to s; transformers.js rewrites it as '[sS].
// - single_word / normalized added tokens: transformers.js does not implement them.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const require = createRequire(path.join(process.env.TOKGEN_DIR ?? '/tmp/tokgen', 'package.json'));
const { TokenizerLoader } = require('@lenml/tokenizers');

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const dir = path.join(root, 'tests/data/qwen3-tokenizer');
const tokenizerJSON = JSON.parse(readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
const tokenizerConfig = JSON.parse(readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));

const plain = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const stripJSON = structuredClone(tokenizerJSON);
for (const t of stripJSON.added_tokens) {
  if (t.content === '<|im_start|>') t.rstrip = true;
  if (t.content === '<|im_end|>') t.lstrip = true;
}
const strip = TokenizerLoader.fromPreTrained({ tokenizerJSON: stripJSON, tokenizerConfig });

const prose = `It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of
foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it was
the season of Darkness, it was the spring of hope, it was the winter of despair. We had everything before us,
we had nothing before us; we were all going direct to Heaven, we were all going direct the other way.`;

const cases = [
  // CJK and fullwidth forms
  '人工智能正在改变世界。我们需要负责任地开发它！',
  '東京は日本の首都です。カタカナとひらがなと漢字。',
  '서울특별시는 대한민국의 수도이다. 한글은 과학적이다!',
  '（全角括号）、【方括号】《书名号》——破折号……省略号',
  '中文English混合123数字abc',
  // Right-to-left scripts, with and without diacritics
  'اللُّغَةُ العَرَبِيَّةُ جَمِيلَةٌ',
  'سلام دنیا! این یک آزمایش است.',
  'בְּרֵאשִׁית בָּרָא אֱלֹהִים',
  // Indic and South-East Asian scripts
  'हिन्दी भाषा में लिखा गया वाक्य। संख्या १२३४',
  'தமிழ் ஒரு பழமையான மொழி',
  'ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ',
  'বাংলা ভাষা',
  // Emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors
  '👩‍💻 coding 🧑🏿‍🚀 space 🏳️‍🌈 pride',
  'flags: 🇯🇵🇺🇸🇩🇪 keycap: 1️⃣ #️⃣ heart: ❤️ vs ❤',
  '😀😃😄😁😆😅😂🤣🥲☺️😊',
  'family 👨‍👩‍👧‍👦 and 👩🏽‍🤝‍👨🏻',
  // Combining marks that NFC composes, reorders or maps
  'e\u0301 a\u0300 o\u0308 n\u0303 c\u0327',
  'A\u030Angstro\u0308m and \u212Bngstr\u00F6m and \u2126hm',
  'q\u0307\u0323 vs q\u0323\u0307 and a\u0323\u0302 vs a\u0302\u0323',
  'Tie\u0302\u0301ng Vie\u0323\u0302t co\u0301 da\u0302\u0301u',
  '\u1100\u1161\u11A8 \u1112\u1161\u11AB\u1100\u1173\u11AF jamo',
  '\u0915\u093C \u0916\u093C \u0929 nukta',
  '\u00C5 \u212B A\u030A \u01FA \u00C5\u0301',
  '\u0301leading combining mark',
  'x\u0301\u0301\u0301\u0301 stacked',
  // Whitespace runs, line endings, trailing spaces
  'line one\r\nline two\r\n\r\nline four\r\n',
  'a\r\rb\n\rc\r\n\nd',
  'trailing spaces   ',
  '   ',
  ' \n ',
  '\t\tindented\n\t\t\tmore\n',
  'x \n\n y',
  'many     spaces     between',
  'nbsp\u00A0\u00A0here and ideographic\u3000\u3000space',
  'em\u2003space and\u2028line separator',
  '\n\n\n',
  '  \t  \n  \t  ',
  // Digits
  '12345678901234567890',
  '3.14e-10 and 6.022E23 and -0.5',
  '٠١٢٣٤٥٦٧٨٩ ०१२३ １２３ ①②③ ½ Ⅻ',
  'Year 2025: 1,234,567.89 USD (+12.5%)',
  // Contractions, mixed case
  "DON'T STOP ME NOW, I'M HAVING SUCH A GOOD TIME",
  "You'Re right, it'S what we'VE said, they'D know, she'Ll go",
  "O'Neil's rock'n'roll isn't 'quoted' ''double''",
  "' s ' t 're",
  "l'homme d'état aujourd'hui",
  'it’s a curly apostrophe',
  // Special and added tokens inside text
  '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n',
  '<|endoftext|><|endoftext|>',
  '<|im_start|',
  '<|im_end|>x<|im_end|>',
  '<think></think>',
  'a<think>b</think>c',
  ' <|im_end|> ',
  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
  '<tool_response>\n{"temp": 21}\n</tool_response>',
  '<|fim_prefix|>def f():<|fim_suffix|>\n    return 1<|fim_middle|>',
  '<|vision_start|><|image_pad|><|image_pad|><|vision_end|>',
  '<<|im_start|>>',
  // Code and markup
  'for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n',
  'SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;',
  '| col1 | col2 |\n|------|------|\n| 1    | 2    |\n',
  '# Title\n\n- item **bold** _it_ `code`\n\n```python\nprint("x")\n```\n',
  '    def __init__(self, x: int = 0) -> None:\n        self._x = x\n',
  'ZWSP\u200Bhere ZWNJ\u200Cthere ZWJ\u200Deverywhere',
  // Long inputs
  prose,
  prose.repeat(8),
  '这是一个很长的中文段落，用于测试分词器在处理长文本时的正确性。'.repeat(20),
  'a'.repeat(1000),
  '1'.repeat(500),
  ' '.repeat(300) + 'x',
  '!?'.repeat(200),
  'supercalifragilisticexpialidocious'.repeat(10),
];

const stripCases = [
  ' <|im_end|> x',
  'a   <|im_start|>   b',
  '\n\n<|im_end|>\n\n',
  '<|im_end|>   ',
  '   <|im_start|>',
  'x<|im_start|> \t\n y <|im_end|>z',
  '<|im_start|> <|im_end|>',
];

const out = [];
for (const text of cases) out.push({ text, ids: plain.encode(text, { add_special_tokens: false }), variant: 'plain' });
for (const text of stripCases) out.push({ text, ids: strip.encode(text, { add_special_tokens: false }), variant: 'strip' });
process.stdout.write(out.map((c) => JSON.stringify(c)).join('\n') + '\n');
