#!/usr/bin/env node
// Checks the proof-of-work page script (gate/src/pow/solver.js) in Node:
//
//   node gate/tests/pow_solver_check.js <solver.js> <challenge> <difficulty>
//
// 1. Evaluates solver.js in a vm context whose `document` has no
//    #gapura-pow element: it must not throw and must define WORKER_SOURCE.
// 2. Evaluates WORKER_SOURCE in a fresh vm context and compares
//    gapuraSha256Hex with Node's crypto on strings of 0..200 bytes.
// 3. Solves the challenge with gapuraSolve(challenge, difficulty, 0, 1,
//    50000000), checks the answer with Node's crypto and prints it.
//
// Prints exactly the counter on stdout and exits 0; on any problem prints
// it on stderr and exits 1. No dependencies.
'use strict';

const fs = require('fs');
const vm = require('vm');
const crypto = require('crypto');

function die(message) {
  process.stderr.write('pow_solver_check: ' + message + '\n');
  process.exit(1);
}

function sha256(text) {
  return crypto.createHash('sha256').update(Buffer.from(text, 'latin1')).digest();
}

function leadingZeroBits(digest) {
  let n = 0;
  for (const byte of digest) {
    if (byte === 0) {
      n += 8;
      continue;
    }
    return n + Math.clz32(byte) - 24;
  }
  return n;
}

const [file, challenge, difficultyText] = process.argv.slice(2);
if (!file || challenge === undefined || difficultyText === undefined) {
  die('usage: node pow_solver_check.js <solver.js> <challenge> <difficulty>');
}
if (!/^\d+$/.test(difficultyText)) {
  die('difficulty must be decimal digits: ' + JSON.stringify(difficultyText));
}
const difficulty = parseInt(difficultyText, 10);

let text;
try {
  text = fs.readFileSync(file, 'latin1');
} catch (e) {
  die('cannot read ' + file + ': ' + e.message);
}

// The text is pasted verbatim into <script>...</script>.
for (const bad of ['</script', '<!--', '<script']) {
  if (text.toLowerCase().includes(bad)) {
    die('solver.js contains ' + JSON.stringify(bad));
  }
}
if (/[^\x09\x0a\x0d\x20-\x7e]/.test(text)) {
  die('solver.js contains a byte that is not printable ASCII');
}

// 1. The page script with nothing to do.
const lookedUp = [];
const pageContext = vm.createContext({
  document: {
    readyState: 'complete',
    getElementById(id) {
      lookedUp.push(id);
      return null;
    },
    addEventListener() {},
  },
  navigator: { hardwareConcurrency: 4 },
  location: { pathname: '/', search: '' },
  setTimeout() {
    die('solver.js scheduled work without a #gapura-pow element');
  },
  Worker: function () {
    die('solver.js started a worker without a #gapura-pow element');
  },
});
try {
  vm.runInContext(text, pageContext, { filename: file });
} catch (e) {
  die('evaluating solver.js threw: ' + (e && e.stack ? e.stack : e));
}
if (!lookedUp.includes('gapura-pow')) {
  die('solver.js did not look up #gapura-pow');
}
const source = pageContext.WORKER_SOURCE;
if (typeof source !== 'string' || source.length === 0) {
  die('evaluating solver.js did not define a string WORKER_SOURCE');
}

// 2. The worker's functions, on their own.
const workerContext = vm.createContext({});
try {
  vm.runInContext(source, workerContext, { filename: 'WORKER_SOURCE' });
} catch (e) {
  die('evaluating WORKER_SOURCE threw: ' + (e && e.stack ? e.stack : e));
}
const { gapuraSha256Hex, gapuraSolve } = workerContext;
if (typeof gapuraSha256Hex !== 'function' || typeof gapuraSolve !== 'function') {
  die('WORKER_SOURCE does not define gapuraSha256Hex and gapuraSolve');
}

let seed = 0x9e3779b9;
function random() {
  // xorshift32: the same strings every run.
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) / 4294967296;
}
const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_:';
const samples = ['', 'abc', 'abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq'];
for (let len = 0; len <= 200; len++) {
  const reps = [55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129].includes(len) ? 4 : 1;
  for (let r = 0; r < reps; r++) {
    let s = '';
    for (let i = 0; i < len; i++) {
      // Mostly the challenge's alphabet, sometimes any ASCII byte.
      s += random() < 0.9
        ? alphabet[Math.floor(random() * alphabet.length)]
        : String.fromCharCode(Math.floor(random() * 128));
    }
    samples.push(s);
  }
}
for (const s of samples) {
  const want = sha256(s).toString('hex');
  const got = gapuraSha256Hex(s);
  if (got !== want) {
    die('gapuraSha256Hex mismatch for ' + JSON.stringify(s) + ' (' + s.length +
      ' bytes): got ' + got + ', want ' + want);
  }
}

// gapuraSolve's stepping and limits, at a difficulty that finds quickly:
// its answer must be the first solving counter of its sequence.
function firstSolution(c, d, start, step, limit) {
  for (let k = 0, n = start; k < limit; k++, n += step) {
    if (leadingZeroBits(sha256(c + ':' + n)) >= d) {
      return String(n);
    }
  }
  return null;
}
const cases = [
  ['short', 4, 0, 1, 1000],
  ['x'.repeat(60), 6, 7, 3, 5000],
  ['y'.repeat(70), 6, 95, 8, 5000],
  ['z'.repeat(120), 5, 99990, 1, 5000],
  [challenge, 6, 9999999, 1, 10000],
  [challenge, 6, 3, 8, 10000],
  [challenge, 7, 123, 37, 20000],
  [challenge, 5, 999999999, 1234567, 3000],
  ['w'.repeat(9), 6, 4294967290, 99991, 5000],
  [challenge, 20, 0, 1, 200],
  [challenge, 0, 12, 5, 1],
];
for (const [c, d, start, step, limit] of cases) {
  const want = firstSolution(c, d, start, step, limit);
  const got = gapuraSolve(c, d, start, step, limit);
  if (got !== want) {
    die('gapuraSolve(' + [JSON.stringify(c), d, start, step, limit].join(', ') +
      ') = ' + JSON.stringify(got) + ', want ' + JSON.stringify(want));
  }
}

// 3. The real search.
const t0 = process.hrtime.bigint();
const counter = gapuraSolve(challenge, difficulty, 0, 1, 50000000);
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
if (counter === null) {
  die('gapuraSolve found no counter within 50000000 candidates');
}
if (typeof counter !== 'string' || !/^(0|[1-9][0-9]*)$/.test(counter)) {
  die('gapuraSolve returned ' + JSON.stringify(counter));
}
const zeros = leadingZeroBits(sha256(challenge + ':' + counter));
if (zeros < difficulty) {
  die('counter ' + counter + ' gives ' + zeros + ' leading zero bits, want ' + difficulty);
}
if (Number(counter) <= 1000000 && firstSolution(challenge, difficulty, 0, 1, Number(counter)) !== null) {
  die('counter ' + counter + ' is not the first solution');
}
if (process.env.POW_CHECK_RATE) {
  const hashes = Number(counter) + 1;
  process.stderr.write('pow_solver_check: ' + hashes + ' hashes in ' + seconds.toFixed(3) +
    ' s: ' + Math.round(hashes / seconds) + ' hashes/s\n');
}
process.stdout.write(counter + '\n');
