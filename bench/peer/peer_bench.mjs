// peer_bench.mjs: the peer of `./dev bench store` (bench/run.sh). AWS Lambda Powertools for
// TypeScript's idempotency (makeIdempotent + its Redis persistence layer, CachePersistenceLayer
// from @aws-lambda-powertools/idempotency/cache, on @redis/client) wrapping a no-op, against the
// same private Redis that bench/store_bench drives. One JSON object a line, like store_bench.
//
//   node peer_bench.mjs run REDIS_URL CONCURRENCY SECONDS WARMUP_SECONDS
//       CONCURRENCY async callers in one process (the peer's client: one @redis/client
//       connection, which pipelines), each calling the idempotent no-op with a message id no
//       run used before: WARMUP_SECONDS unrecorded, then SECONDS measured. Reports messages/s,
//       p50/p99 per message (both round trips: SET NX EX, then SET EX of the result) and the
//       client CPU per message: process.cpuUsage() (user + system, every thread of the
//       process) over the measured window ÷ messages.
//   node peer_bench.mjs overlap REDIS_URL PAIRS
//       PAIRS keys, each called twice at once while the first call's handler is still running,
//       with a registered Lambda-like context and without one: how many keys ran the handler
//       twice.
//
// The Lambda-like context is registered with config.registerLambdaContext: Powertools writes
// the in-progress record's expiry from getRemainingTimeInMillis(), and without it an in-progress
// record looks orphaned to a concurrent duplicate, which then takes it over and runs again.
import { readFileSync } from 'node:fs';
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { CachePersistenceLayer } from '@aws-lambda-powertools/idempotency/cache';
import { createClient } from '@redis/client';

// As long as the library's lease in store_bench (kLease, 60 s): both hold a claim that long.
const REMAINING_MS = 60_000;
const lambdaContext = {
  functionName: 'idempotency-bench-peer',
  awsRequestId: 'bench',
  getRemainingTimeInMillis: () => REMAINING_MS,
};

function version(pkg) {
  const url = new URL(`./node_modules/${pkg}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, 'utf8')).version;
}

function nonce() {
  return `${process.pid.toString(16)}${Date.now().toString(16)}${Math.random().toString(16).slice(2, 10)}`;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function percentileUs(sortedNs, p) {
  if (sortedNs.length === 0) return 0;
  return Number(sortedNs[Math.floor(p * (sortedNs.length - 1))]) / 1000;
}

// idempotent(client, withContext, handler): handler made idempotent as a user of the package
// would, with its own config and persistence layer (configure() binds one config per layer).
function idempotent(client, withContext, handler) {
  const config = new IdempotencyConfig({});
  if (withContext) config.registerLambdaContext(lambdaContext);
  const persistenceStore = new CachePersistenceLayer({ client });
  return makeIdempotent(handler, { persistenceStore, config, keyPrefix: 'peer-bench' });
}

async function run(url, concurrency, seconds, warmupSeconds) {
  const client = await createClient({ url }).connect();
  let executions = 0;
  // The no-op: counts that it ran (every key is new, so every call must run it once).
  const handler = idempotent(client, true, async () => {
    executions += 1;
  });
  const prefix = nonce();
  let phase = 0; // 0 warm-up, 1 measured, 2 stop
  let calls = 0;
  let errors = 0;
  let messages = 0;
  const latencies = [];
  const worker = async (w) => {
    for (let i = 0; phase !== 2; i++) {
      const record = phase === 1;
      const t0 = process.hrtime.bigint();
      calls += 1;
      try {
        await handler({ messageId: `${prefix}-${concurrency}-${w}-${i}` });
      } catch (e) {
        if (errors++ < 3) console.error(`peer_bench: ${e?.name}: ${e?.message}`);
        continue;
      }
      if (record) {
        latencies.push(process.hrtime.bigint() - t0);
        messages += 1;
      }
    }
  };
  const workers = Array.from({ length: concurrency }, (_, w) => worker(w));
  await sleep(warmupSeconds * 1000);
  const cpuStart = process.cpuUsage();
  const start = process.hrtime.bigint();
  phase = 1;
  await sleep(seconds * 1000);
  phase = 2;
  const elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  const cpu = process.cpuUsage(cpuStart);
  await Promise.all(workers);
  await client.quit();
  latencies.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const cpuUs = cpu.user + cpu.system;
  console.log(
    JSON.stringify({
      kind: 'peer',
      backend: 'redis',
      path: 'pair',
      threads: concurrency,
      ops: messages,
      seconds: Number(elapsed.toFixed(3)),
      rate: Number((messages / elapsed).toFixed(1)),
      p50_us: Number(percentileUs(latencies, 0.5).toFixed(1)),
      p99_us: Number(percentileUs(latencies, 0.99).toFixed(1)),
      cpu_us_per_op: messages ? Number((cpuUs / messages).toFixed(2)) : 0,
      // A call that failed, or returned without running the no-op (a new key must run it).
      unexpected: errors + (calls - errors - executions),
      node: process.version,
      powertools: version('@aws-lambda-powertools/idempotency'),
      redis_client: version('@redis/client'),
      tool: 'makeIdempotent(no-op) on CachePersistenceLayer + @redis/client, Lambda context registered',
    }),
  );
}

// Both calls of a key start together; the handler runs for 300 ms, so the second call's
// SET NX finds the first one's INPROGRESS record.
async function overlapOnce(client, withContext, pairs) {
  const runs = new Map();
  const handler = idempotent(client, withContext, async (event) => {
    runs.set(event.messageId, (runs.get(event.messageId) ?? 0) + 1);
    await sleep(300);
  });
  const prefix = nonce();
  const refusals = {};
  const warn = console.warn; // without a context Powertools warns on every call; counted instead
  let warnings = 0;
  console.warn = () => {
    warnings += 1;
  };
  try {
    const settled = await Promise.all(
      Array.from({ length: pairs }, (_, k) => {
        const event = { messageId: `${prefix}-overlap-${k}` };
        return Promise.allSettled([handler(event), handler(event)]);
      }),
    );
    for (const r of settled.flat()) {
      if (r.status === 'rejected') refusals[r.reason?.name] = (refusals[r.reason?.name] ?? 0) + 1;
    }
  } finally {
    console.warn = warn;
  }
  const twice = [...runs.values()].filter((n) => n > 1).length;
  const total = [...runs.values()].reduce((a, b) => a + b, 0);
  return { keys: pairs, executed_twice: twice, executions: total, refusals, warnings };
}

async function overlap(url, pairs) {
  const client = await createClient({ url }).connect();
  const withContext = await overlapOnce(client, true, pairs);
  const withoutContext = await overlapOnce(client, false, pairs);
  await client.quit();
  console.log(
    JSON.stringify({
      kind: 'peer_overlap',
      backend: 'redis',
      handler_ms: 300,
      with_context: withContext,
      without_context: withoutContext,
    }),
  );
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'run' && args.length === 4) {
  await run(args[0], Number(args[1]), Number(args[2]), Number(args[3]));
} else if (mode === 'overlap' && args.length === 2) {
  await overlap(args[0], Number(args[1]));
} else {
  console.error(
    'usage: node peer_bench.mjs run REDIS_URL CONCURRENCY SECONDS WARMUP_SECONDS\n' +
      '       node peer_bench.mjs overlap REDIS_URL PAIRS',
  );
  process.exit(2);
}
