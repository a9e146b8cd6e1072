// Gapura proof of work: find a decimal counter such that
// SHA-256(challenge + ":" + counter) starts with `difficulty` zero bits,
// then post it with the challenge to /.well-known/gapura/pow.
//
// WORKER_SOURCE is the text of `install` below, called on the global
// scope: it defines gapuraSolve and gapuraSha256Hex there and, inside a
// dedicated worker, answers the page's messages. The page runs it from a
// blob: URL (CSP worker-src blob:), or calls `install` itself to search on
// the main thread when workers are unavailable. No eval, no network.
var WORKER_SOURCE = (function () {
  'use strict';

  function install(scope) {
    'use strict';

    var K = new Int32Array([
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
    ]);
    var IV = new Int32Array([
      0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19
    ]);
    // The message schedule, reused by every block.
    var W = new Int32Array(64);

    // Fills S[16..63] from S[0..15]: the message schedule.
    function expand(S) {
      var i, x, y;
      for (i = 16; i < 64; i++) {
        x = S[i - 15];
        y = S[i - 2];
        S[i] = ((((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3)) +
          (((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10)) +
          S[i - 7] + S[i - 16]) | 0;
      }
    }

    // Runs rounds r0..63 of one block with the expanded schedule S. `st`
    // (at so) is the chaining value before the block, `init` (at io) the
    // working variables after round r0 - 1 (st itself when r0 is 0); the
    // new chaining value goes to `out` at oo.
    function rounds(S, st, so, init, io, r0, out, oo) {
      var i, t1, t2;
      var a = init[io], b = init[io + 1], c = init[io + 2], d = init[io + 3];
      var e = init[io + 4], f = init[io + 5], g = init[io + 6], h = init[io + 7];
      for (i = r0; i < 64; i++) {
        t1 = (h + (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) +
          (g ^ (e & (f ^ g))) + K[i] + S[i]) | 0;
        t2 = ((((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) +
          ((a & b) | (c & (a | b)))) | 0;
        h = g;
        g = f;
        f = e;
        e = (d + t1) | 0;
        d = c;
        c = b;
        b = a;
        a = (t1 + t2) | 0;
      }
      out[oo] = (st[so] + a) | 0;
      out[oo + 1] = (st[so + 1] + b) | 0;
      out[oo + 2] = (st[so + 2] + c) | 0;
      out[oo + 3] = (st[so + 3] + d) | 0;
      out[oo + 4] = (st[so + 4] + e) | 0;
      out[oo + 5] = (st[so + 5] + f) | 0;
      out[oo + 6] = (st[so + 6] + g) | 0;
      out[oo + 7] = (st[so + 7] + h) | 0;
    }

    // One whole block whose 16 words are in W.
    function compress(st, so, init, io, r0, out, oo) {
      expand(W);
      rounds(W, st, so, init, io, r0, out, oo);
    }

    // Runs rounds 0..n-1 only (W[0..n-1] set, n <= 16) from `st` at so;
    // the working variables go to `out` at oo.
    function partialRounds(st, so, n, out, oo) {
      var a = st[so], b = st[so + 1], c = st[so + 2], d = st[so + 3];
      var e = st[so + 4], f = st[so + 5], g = st[so + 6], h = st[so + 7];
      var i, t1, t2;
      for (i = 0; i < n; i++) {
        t1 = (h + (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) +
          (g ^ (e & (f ^ g))) + K[i] + W[i]) | 0;
        t2 = ((((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) +
          ((a & b) | (c & (a | b)))) | 0;
        h = g;
        g = f;
        f = e;
        e = (d + t1) | 0;
        d = c;
        c = b;
        b = a;
        a = (t1 + t2) | 0;
      }
      out[oo] = a;
      out[oo + 1] = b;
      out[oo + 2] = c;
      out[oo + 3] = d;
      out[oo + 4] = e;
      out[oo + 5] = f;
      out[oo + 6] = g;
      out[oo + 7] = h;
    }

    // The padded length in bytes of a message of `len` bytes.
    function paddedLength(len) {
      return (((len + 8) >> 6) + 1) << 6;
    }

    // Writes the 0x80 marker and the big-endian bit length after `len`
    // message bytes in `buf` (already zero there).
    function pad(buf, len) {
      var end = buf.length;
      var hi = Math.floor(len / 0x20000000);
      var lo = (len * 8) >>> 0;
      buf[len] = 0x80;
      buf[end - 8] = hi >>> 24;
      buf[end - 7] = (hi >>> 16) & 0xff;
      buf[end - 6] = (hi >>> 8) & 0xff;
      buf[end - 5] = hi & 0xff;
      buf[end - 4] = lo >>> 24;
      buf[end - 3] = (lo >>> 16) & 0xff;
      buf[end - 2] = (lo >>> 8) & 0xff;
      buf[end - 1] = lo & 0xff;
    }

    // Big-endian words of buf[4 * from ..] into words[from .. to - 1].
    function toWords(buf, words, from, to) {
      for (var i = from; i < to; i++) {
        var j = i << 2;
        words[i] = (buf[j] << 24) | (buf[j + 1] << 16) | (buf[j + 2] << 8) | buf[j + 3];
      }
    }

    function loadBlock(words, b) {
      var o = b << 4;
      for (var i = 0; i < 16; i++) {
        W[i] = words[o + i];
      }
    }

    // Whether a digest (eight words at o) starts with `bits` zero bits.
    function leadingZeros(h, o, bits) {
      for (var i = 0; i < 8; i++) {
        var w = h[o + i];
        if (bits <= 32) {
          return bits <= 0 || Math.clz32(w) >= bits;
        }
        if (w !== 0) {
          return false;
        }
        bits -= 32;
      }
      return true;
    }

    function hex(h, o) {
      var s = '';
      for (var i = 0; i < 8; i++) {
        var x = (h[o + i] >>> 0).toString(16);
        s += '00000000'.slice(x.length) + x;
      }
      return s;
    }

    // SHA-256 of the bytes of an ASCII string (each char code's low byte),
    // as 64 lowercase hex digits.
    function gapuraSha256Hex(text) {
      text = String(text);
      var len = text.length;
      var buf = new Uint8Array(paddedLength(len));
      for (var i = 0; i < len; i++) {
        buf[i] = text.charCodeAt(i) & 0xff;
      }
      pad(buf, len);
      var blocks = buf.length >> 6;
      var words = new Int32Array(blocks << 4);
      toWords(buf, words, 0, blocks << 4);
      var h = new Int32Array(IV);
      for (var b = 0; b < blocks; b++) {
        loadBlock(words, b);
        compress(h, 0, h, 0, 0, h, 0);
      }
      return hex(h, 0);
    }

    // The first counter among start, start + step, ... (at most `limit` of
    // them) such that SHA-256(challenge + ":" + counter) starts with
    // `difficulty` zero bits, as a decimal string; null if none.
    //
    // The counter's digits live in the message buffer and are stepped in
    // place. Blocks made only of prefix bytes are hashed once, and so are
    // the rounds of the first changing block that read only prefix words;
    // a block is hashed again only when a digit in or before it changed.
    function gapuraSolve(challenge, difficulty, start, step, limit) {
      var prefix = String(challenge) + ':';
      var plen = prefix.length;
      var bits = difficulty | 0;
      start = Math.floor(Number(start));
      step = Math.floor(Number(step));
      limit = Math.floor(Number(limit));
      if (!(start >= 0) || !(step >= 1) || !(limit > 0) || start > 9007199254740991) {
        return null;
      }
      var pbytes = new Uint8Array(plen);
      for (var i = 0; i < plen; i++) {
        pbytes[i] = prefix.charCodeAt(i) & 0xff;
      }

      // Blocks before `cb` are prefix only; so are the first `kc` words
      // of block cb.
      var cb = plen >> 6;
      var kc = (plen & 63) >> 2;
      var chain = null; // chaining values: entering block b at 8 * b
      var part = new Int32Array(8); // block cb after kc rounds
      var words = null;
      var tail = null; // expanded schedules of the blocks after the digits
      var fixed = 0; // the first such block
      var buf = null;
      var blocks = 0;
      var digits = String(start);
      var dlen = 0;
      var end = 0; // index of the last digit in buf
      var dirty = 0; // lowest buf index changed since the last hash
      var b;

      // (Re)builds the buffer for `digits`.
      function layout() {
        dlen = digits.length;
        var len = plen + dlen;
        buf = new Uint8Array(paddedLength(len));
        buf.set(pbytes, 0);
        for (var j = 0; j < dlen; j++) {
          buf[plen + j] = digits.charCodeAt(j);
        }
        pad(buf, len);
        end = len - 1;
        blocks = buf.length >> 6;
        words = new Int32Array(blocks << 4);
        toWords(buf, words, 0, blocks << 4);
        chain = new Int32Array((blocks + 1) << 3);
        chain.set(IV, 0);
        for (var k = 0; k < cb; k++) {
          loadBlock(words, k);
          compress(chain, k << 3, chain, k << 3, 0, chain, (k + 1) << 3);
        }
        loadBlock(words, cb);
        partialRounds(chain, cb << 3, kc, part, 0);
        // Blocks that start after the last digit hold only padding and
        // the length: their schedules never change for this layout.
        fixed = Math.max(cb + 1, (end >> 6) + 1);
        tail = [];
        for (var t = fixed; t < blocks; t++) {
          var sched = new Int32Array(64);
          sched.set(words.subarray(t << 4, (t + 1) << 4), 0);
          expand(sched);
          tail.push(sched);
        }
        dirty = plen;
      }

      layout();
      var last = blocks << 3;
      for (var n = 0; n < limit; n++) {
        if (n > 0) {
          // Add `step` to the decimal digits in place.
          var carry = step;
          var p = end;
          while (carry > 0 && p >= plen) {
            var v = buf[p] - 48 + carry;
            if (v < 10) {
              buf[p] = 48 + v;
              carry = 0;
            } else {
              carry = v < 2147483647 ? ((v / 10) | 0) : Math.floor(v / 10);
              buf[p] = 48 + v - carry * 10;
            }
            p--;
          }
          if (carry > 0) {
            digits = String(carry);
            for (var q = plen; q <= end; q++) {
              digits += String.fromCharCode(buf[q]);
            }
            layout();
            last = blocks << 3;
          } else if (p + 1 < dirty) {
            dirty = p + 1;
          }
        }
        // Refresh the words the changed digits touch, then hash from the
        // first block they are in.
        toWords(buf, words, dirty >> 2, (end >> 2) + 1);
        b = dirty >> 6;
        if (b <= cb) {
          loadBlock(words, cb);
          compress(chain, cb << 3, part, 0, kc, chain, (cb + 1) << 3);
          b = cb + 1;
        }
        for (; b < fixed; b++) {
          loadBlock(words, b);
          compress(chain, b << 3, chain, b << 3, 0, chain, (b + 1) << 3);
        }
        for (; b < blocks; b++) {
          rounds(tail[b - fixed], chain, b << 3, chain, b << 3, 0, chain, (b + 1) << 3);
        }
        dirty = end + 1;
        if (leadingZeros(chain, last, bits)) {
          var out = '';
          for (var r = plen; r <= end; r++) {
            out += String.fromCharCode(buf[r]);
          }
          return out;
        }
      }
      return null;
    }

    scope.gapuraSha256Hex = gapuraSha256Hex;
    scope.gapuraSolve = gapuraSolve;

    // Inside a dedicated worker: answer {challenge, difficulty, start,
    // step} with 'ready', a 'progress' per chunk of hashes, then 'found'
    // (or 'exhausted' past 2^53). The page terminates the worker.
    if (typeof scope.importScripts === 'function' && typeof scope.postMessage === 'function') {
      scope.onmessage = function (event) {
        var m = event.data || {};
        var chunk = 65536;
        var start = m.start;
        scope.postMessage({ type: 'ready' });
        for (;;) {
          if (start + m.step * chunk > 9007199254740991) {
            scope.postMessage({ type: 'exhausted' });
            return;
          }
          var found = gapuraSolve(m.challenge, m.difficulty, start, m.step, chunk);
          if (found !== null) {
            scope.postMessage({ type: 'found', counter: found });
            return;
          }
          start += m.step * chunk;
          scope.postMessage({ type: 'progress', tried: chunk });
        }
      };
    }
    return scope;
  }

  var source = '(' + String(install) + ')(this);\n';

  function run() {
    var root = document.getElementById('gapura-pow');
    if (!root) {
      return;
    }
    var form = document.getElementById('gapura-pow-form');
    var status = document.getElementById('gapura-pow-status');
    var challenge = root.getAttribute('data-challenge') || '';
    var difficulty = parseInt(root.getAttribute('data-difficulty') || '', 10);
    var done = false;
    var tried = 0;
    var started = Date.now();
    var lastStatus = 0;
    var workers = [];
    var blobUrl = null;
    var watchdog = null;
    var fallback = false;

    if (document.documentElement) {
      document.documentElement.className += ' js';
    }

    function say(text) {
      if (status) {
        status.textContent = text;
      }
    }

    function count(n) {
      if (n < 1000) {
        return String(n);
      }
      if (n < 1000000) {
        return (n / 1000).toFixed(n < 10000 ? 1 : 0) + 'k';
      }
      return (n / 1000000).toFixed(n < 10000000 ? 1 : 0) + 'M';
    }

    function progress(n) {
      tried += n;
      var now = Date.now();
      if (now - lastStatus >= 1000) {
        lastStatus = now;
        var secs = Math.max(1, Math.round((now - started) / 1000));
        say('Working... ' + count(tried) + ' hashes tried (' + secs + ' s)');
      }
    }

    function stopWorkers() {
      if (watchdog !== null) {
        clearTimeout(watchdog);
        watchdog = null;
      }
      for (var i = 0; i < workers.length; i++) {
        try {
          workers[i].terminate();
        } catch (e) {
          // Already gone.
        }
      }
      workers = [];
      if (blobUrl !== null) {
        try {
          URL.revokeObjectURL(blobUrl);
        } catch (e) {
          // Nothing to free.
        }
        blobUrl = null;
      }
    }

    function setField(name, value) {
      var input = form.querySelector('input[name="' + name + '"]');
      if (!input) {
        input = document.createElement('input');
        input.type = 'hidden';
        input.name = name;
        form.appendChild(input);
      }
      input.value = value;
    }

    function solved(counter) {
      if (done) {
        return;
      }
      done = true;
      stopWorkers();
      say('Done. Continuing...');
      setField('challenge', challenge);
      setField('solution', counter);
      setField('return', location.pathname + location.search);
      HTMLFormElement.prototype.submit.call(form);
    }

    function fail(text) {
      if (!done) {
        done = true;
        stopWorkers();
        say(text);
      }
    }

    // The main thread's search: chunks sized to about 50 ms, each after a
    // setTimeout so the page stays responsive.
    function mainThread() {
      if (done || fallback) {
        return;
      }
      fallback = true;
      stopWorkers();
      var core = install({});
      var next = 0;
      var chunk = 2048;
      function slice() {
        if (done) {
          return;
        }
        if (next > 9007199254740991 - chunk) {
          fail('Could not finish the check. Please reload the page.');
          return;
        }
        var t0 = Date.now();
        var found = core.gapuraSolve(challenge, difficulty, next, 1, chunk);
        if (found !== null) {
          solved(found);
          return;
        }
        next += chunk;
        progress(chunk);
        var took = Date.now() - t0;
        if (took < 25 && chunk < 1048576) {
          chunk *= 2;
        } else if (took > 100 && chunk > 256) {
          chunk = Math.floor(chunk / 2);
        }
        setTimeout(slice, 0);
      }
      setTimeout(slice, 0);
    }

    function startWorkers() {
      if (typeof Worker === 'undefined' || typeof Blob === 'undefined' ||
          typeof URL === 'undefined' || typeof URL.createObjectURL !== 'function') {
        return false;
      }
      var n = Math.min(8, Math.max(1, navigator.hardwareConcurrency || 1));
      var ready = 0;
      var exhausted = 0;
      try {
        blobUrl = URL.createObjectURL(new Blob([source], { type: 'text/javascript' }));
        for (var i = 0; i < n; i++) {
          var w = new Worker(blobUrl);
          workers.push(w);
          w.onmessage = function (event) {
            if (done) {
              return;
            }
            var m = event.data || {};
            if (m.type === 'ready') {
              ready++;
              if (ready === 1 && watchdog !== null) {
                clearTimeout(watchdog);
                watchdog = null;
              }
            } else if (m.type === 'progress') {
              progress(m.tried);
            } else if (m.type === 'found' && typeof m.counter === 'string') {
              solved(m.counter);
            } else if (m.type === 'exhausted') {
              exhausted++;
              if (exhausted === n) {
                fail('Could not finish the check. Please reload the page.');
              }
            }
          };
          // A worker that cannot start (blocked, failed to load) hands
          // the search to the main thread.
          w.onerror = function (event) {
            if (event && typeof event.preventDefault === 'function') {
              event.preventDefault();
            }
            mainThread();
          };
          w.postMessage({ challenge: challenge, difficulty: difficulty, start: i, step: n });
        }
      } catch (e) {
        stopWorkers();
        return false;
      }
      // No worker answered at all: search here instead.
      watchdog = setTimeout(function () {
        watchdog = null;
        if (ready === 0) {
          mainThread();
        }
      }, 5000);
      return true;
    }

    if (!form || !/^[A-Za-z0-9_-]{1,256}$/.test(challenge) || !(difficulty >= 0 && difficulty <= 256)) {
      say('This page is damaged. Please reload it.');
      return;
    }
    say('Working...');
    if (!startWorkers()) {
      mainThread();
    }
  }

  if (typeof document !== 'undefined' && document !== null &&
      typeof document.getElementById === 'function') {
    if (document.readyState === 'loading' && typeof document.addEventListener === 'function') {
      document.addEventListener('DOMContentLoaded', run);
    } else {
      run();
    }
  }

  return source;
})();
