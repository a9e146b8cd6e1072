-- Appended to every wrk script bench/compare.py runs: prints one line of
-- key=value pairs at the end of the run, which compare.py parses instead of
-- wrk's human-readable summary. Latencies are in microseconds; `requests`
-- counts responses (with pipelining, every response of a batch counts once).
function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      "WRKSTAT requests=%d duration_us=%d bytes=%d connect=%d read=%d write=%d status=%d timeout=%d p50_us=%.0f p99_us=%.0f mean_us=%.1f max_us=%.0f\n",
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency:percentile(50), latency:percentile(99), latency.mean, latency.max))
end
