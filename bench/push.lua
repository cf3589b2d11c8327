-- push.lua — wrk script: POSTs Pub/Sub push envelopes, each with a messageId never sent before.
--
--   wrk -t2 -c16 -d10s --latency -s bench/push.lua http://127.0.0.1:PORT/ -- NONCE
--
-- The id must be unique per request, or the gateway answers 204 from its store instead of
-- calling the upstream, and the run would measure the duplicate path. wrk runs one Lua state per
-- thread, so an id is NONCE-THREAD-COUNTER: NONCE (the first script argument) is unique per wrk
-- run (the store keeps ids across runs against one gateway), THREAD is handed to each thread by
-- setup(), and COUNTER is the thread's own.
--
-- done() prints one line, `BENCH_JSON {...}`, which bench/run.sh picks up: requests/s, p50,
-- p99 and max latency in µs, and every kind of error wrk counts. `non2xx` is wrk's own status
-- count, which is every response with a status >= 400.

local thread_count = 0

-- setup() runs in wrk's main Lua state, once per thread, before that thread's init().
function setup(thread)
  thread_count = thread_count + 1
  thread:set("thread_id", thread_count)
end

local prefix, counter = nil, 0
-- A fixed, small payload: data is base64 of {"order":42}.
local suffix = '","data":"eyJvcmRlciI6NDJ9","attributes":{}},'
  .. '"subscription":"projects/p/subscriptions/s","deliveryAttempt":1}'

function init(args)
  local nonce = args[1] or tostring(os.time())
  prefix = '{"message":{"messageId":"' .. nonce .. "-" .. tostring(thread_id) .. "-"
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  counter = counter + 1
  -- wrk.format adds Content-Length for the body.
  return wrk.format(nil, nil, nil, prefix .. counter .. suffix)
end

function done(summary, latency, requests)
  local e = summary.errors
  local seconds = summary.duration / 1e6
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_s":%.3f,"rps":%.1f,"p50_us":%d,"p99_us":%d,'
      .. '"max_us":%d,"connect_errors":%d,"read_errors":%d,"write_errors":%d,'
      .. '"timeouts":%d,"non2xx":%d}\n',
    summary.requests, seconds, summary.requests / seconds,
    latency:percentile(50), latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.timeout, e.status))
end
