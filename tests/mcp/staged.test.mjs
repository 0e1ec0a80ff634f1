// RemoteTransferClusterTests (KL-7 item 5): the seeds' staged RF3 transfer scenario (000,
// "A dedicated test on the Aspire-owned replicated cluster" .. "no unknown response is
// manufactured"; 001 TASK-XFER-RF3-RECEIPT-VALUE) on a real local RF3 cluster, with the
// source queue on partition 1 and the destination on partition 2, run through each of four
// routes with one persisted database administrator:
//   sdk  the C SDK (build/scenario-sdk, tests/scenario/sdk_route.c: one call per process,
//        arguments and tokens on stdin, the SDK's canonical JSON on stdout)
//   mcp  the official MCP TypeScript SDK Client over StdioClientTransport to bin/keyload-mcp
//   sql  Q1 through `keyload sql -` (statements WITH COMMAND_ID, on stdin, never argv)
//   mq   Q1 through the MCP `query` tool
// Each route has its own source and destination lane (its name) and its own transfer ids
// and command ids; the queues, the principal and its grants are shared. Stages (a) .. (g)
// and the ACK receipt-value comparison are checked on every route; the cluster is
// cold-restarted three times (after a, c and d) and every client reopened after each.
// Everything started is stopped on exit, failure or timeout, by pid.
import crypto from 'node:crypto';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Cluster, bin, check, root, run, summary } from './lib.mjs';

const BUDGET_MS = 240000; // under run.sh's 270 s per script, so that teardown still runs
const DB = 'stage/xfer';
const SRC = 'stg-src';
const DST = 'stg-dst';
const ADMIN = 'xadmin';
const SDK = path.join(root, 'build', 'scenario-sdk');
// The only answers there are: OK or a named status code (DESIGN.md §9).
const CODES = new Set(['OK', 'INVALID_ARGUMENT', 'UNAUTHENTICATED', 'PERMISSION_DENIED', 'NOT_FOUND', 'CONFLICT',
  'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION', 'NOT_LEADER', 'UNAVAILABLE', 'DEADLINE_EXCEEDED',
  'UNKNOWN_WRITE_OUTCOME', 'INTERNAL']);

const cluster = new Cluster();
const mcpClients = new Set();
const answers = []; // every answer of every route: {route, op, code}
const started = Date.now();

async function teardown() {
  for (const c of mcpClients) await c.close().catch(() => {});
  mcpClients.clear();
  await cluster.down();
}
const timer = setTimeout(async () => {
  check(`the whole scenario within ${BUDGET_MS / 1000} s`, false);
  await teardown();
  summary();
  process.exit(1);
}, BUDGET_MS);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'])
  process.on(sig, async () => { await teardown(); process.exit(1); });
// A reader that goes away (e.g. `| head`) or an error outside main() must not leave the
// cluster running.
process.stdout.on('error', async () => { await teardown(); process.exit(1); });
for (const ev of ['uncaughtException', 'unhandledRejection'])
  process.on(ev, async (e) => { check(`no ${ev}`, false, e?.stack ?? String(e)); await teardown(); summary(); process.exit(1); });

// ---------------------------------------------------------------- helpers

const uuid = () => crypto.randomUUID();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Deep comparison of two independently parsed JSON values: the first differing path, or
// null when every field is equal (keys as sets, arrays in order, scalars by value).
function firstDiff(a, b, at = '$') {
  if (typeof a !== typeof b || Array.isArray(a) !== Array.isArray(b) || (a === null) !== (b === null))
    return `${at}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`;
  if (Array.isArray(a)) {
    if (a.length !== b.length) return `${at}: length ${a.length} vs ${b.length}`;
    for (let i = 0; i < a.length; i++) { const d = firstDiff(a[i], b[i], `${at}[${i}]`); if (d) return d; }
    return null;
  }
  if (a !== null && typeof a === 'object') {
    const ka = Object.keys(a).sort(), kb = Object.keys(b).sort();
    if (ka.join('\0') !== kb.join('\0')) return `${at}: keys ${ka} vs ${kb}`;
    for (const k of ka) { const d = firstDiff(a[k], b[k], `${at}.${k}`); if (d) return d; }
    return null;
  }
  return a === b ? null : `${at}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`;
}
// A transfer inspection without its read position (applied_index moves with every commit of
// the partition; everything else is the record itself).
const record = (v) => { if (!v || typeof v !== 'object') return v; const { applied_index: _, ...rest } = v; return rest; };
// Q1 string literal.
const q = (s) => `'${String(s).replaceAll("'", "''")}'`;
const flipLastByte = (b64) => { const b = Buffer.from(b64, 'base64'); b[b.length - 1] ^= 0x01; return b.toString('base64'); };

// Every route answer is normalized to {code, value, text, error}: code 'OK' with the answer
// object (value) and its exact text, or the named code with the error object. An answer that
// is neither is recorded as code null and fails the "no unknown response" check.
function record_answer(route, op, a) {
  answers.push({ route, op, code: a.code, detail: a.error?.detail });
  if (!CODES.has(a.code)) check(`${route} ${op}: a named code`, false, a);
  return a;
}
function fromError(e, text) {
  const ok = e && typeof e.code === 'string' && typeof e.message === 'string' && 'detail' in e;
  return { code: ok ? e.code : null, error: e, text, value: null };
}

// ---- the C SDK route: build/scenario-sdk OP, arguments as JSON on stdin.
function sdkRoute(env) {
  return {
    name: 'sdk',
    async call(op, args) {
      const r = await run(SDK, [op], { env, input: JSON.stringify(args), timeoutMs: 30000 });
      let j = null;
      try { j = JSON.parse(r.stdout); } catch { /* below */ }
      let a;
      if (r.code === 0 && j && !j.error) a = { code: 'OK', value: j, text: r.stdout.trim() };
      else if (r.code === 1 && j?.error) a = fromError(j.error, r.stdout.trim());
      else a = { code: null, value: null, text: r.stdout, error: { exit: r.code, stderr: r.stderr, spawn: r.error } };
      return record_answer('sdk', op, a);
    },
    create: (t, cmd, body) => ({ op: 'create', args: { source_queue: SRC, source_lane: t.lane, transfer_id: t.id, dest_queue: DST,
      dest_lane: t.lane, body: body ?? t.body, headers: { route: t.lane }, fields: { seq: t.seq }, command_id: cmd } }),
    accept: (t, token, cmd) => ({ op: 'accept', args: { dest_queue: DST, dest_lane: t.lane, intent_token: token, command_id: cmd } }),
    complete: (t, token, cmd) => ({ op: 'complete', args: { source_queue: SRC, source_lane: t.lane, transfer_id: t.id, receipt_token: token, command_id: cmd } }),
    inspect: (t) => ({ op: 'inspect', args: { source_queue: SRC, source_lane: t.lane, transfer_id: t.id } }),
    receipt: (t) => ({ op: 'receipt', args: { dest_queue: DST, source_queue: SRC, source_lane: t.lane, transfer_id: t.id } }),
    receive: (lane, cmd) => ({ op: 'receive', args: { queue: DST, lane, max: 10, lease_ms: 60000, command_id: cmd } }),
    ack: (tokens, cmd) => ({ op: 'ack', args: { queue: DST, lease_tokens: tokens, command_id: cmd } }),
  };
}

// ---- the official MCP client route (and the MCP `query` route below).
async function connect(env) {
  const transport = new StdioClientTransport({ command: bin('keyload-mcp'), args: [], cwd: root, stderr: 'pipe', env });
  transport.stderr?.on('data', () => {});
  const client = new Client({ name: 'keyload-staged-test', version: '1.0.0' });
  await client.connect(transport);
  mcpClients.add(client);
  return client;
}
async function mcpCall(holder, route, name, args, label = name) {
  let r;
  try {
    r = await holder.client.callTool({ name, arguments: args });
  } catch (e) {
    return record_answer(route, label, { code: null, value: null, text: '', error: String(e) });
  }
  const text = r.content?.[0]?.text ?? '';
  let parsed = null;
  try { parsed = JSON.parse(text); } catch { /* below */ }
  if (firstDiff(parsed, r.structuredContent) !== null)
    check(`${route} ${label}: text content and structuredContent are the same object`, false, r);
  if (r.isError) return record_answer(route, label, fromError(r.structuredContent?.error, text));
  return record_answer(route, label, { code: 'OK', value: r.structuredContent, text });
}
function mcpRoute(holder) {
  return {
    name: 'mcp',
    call: (op, args) => mcpCall(holder, 'mcp', op, args),
    create: (t, cmd, body) => ({ op: 'transfer_create', args: { source_queue: SRC, source_lane: t.lane, transfer_id: t.id, dest_queue: DST,
      dest_lane: t.lane, body: body ?? t.body, headers: { route: t.lane }, fields: [`seq:int=${t.seq}`], command_id: cmd } }),
    accept: (t, token, cmd) => ({ op: 'transfer_accept', args: { dest_queue: DST, dest_lane: t.lane, intent_token: token, command_id: cmd } }),
    complete: (t, token, cmd) => ({ op: 'transfer_complete', args: { source_queue: SRC, source_lane: t.lane, transfer_id: t.id, receipt_token: token, command_id: cmd } }),
    inspect: (t) => ({ op: 'transfer_inspect', args: { source_queue: SRC, source_lane: t.lane, transfer_id: t.id } }),
    receipt: (t) => ({ op: 'transfer_receipt', args: { dest_queue: DST, source_queue: SRC, source_lane: t.lane, transfer_id: t.id } }),
    receive: (lane, cmd) => ({ op: 'receive', args: { queue: DST, lane, max: 10, lease_ms: 60000, command_id: cmd } }),
    ack: (tokens, cmd) => ({ op: 'ack', args: { queue: DST, lease_tokens: tokens, command_id: cmd } }),
  };
}

// ---- Q1 statements, shared by both Q1 routes.
const q1 = {
  create: (t, cmd, body) => `CALL keyload.queue-transfer.create.v1(source_queue => ${q(SRC)}, source_lane => ${q(t.lane)},
  transfer_id => ${q(t.id)}, destination_queue => ${q(DST)}, destination_lane => ${q(t.lane)}, body => ${q(body ?? t.body)},
  headers => ${JSON.stringify({ route: t.lane })}, fields => ${JSON.stringify({ seq: t.seq })}) WITH COMMAND_ID ${q(cmd)};`,
  accept: (t, token, cmd) => `CALL keyload.queue-transfer.accept.v1(destination_queue => ${q(DST)}, destination_lane => ${q(t.lane)},
  intent_token => ${q(token)}) WITH COMMAND_ID ${q(cmd)};`,
  complete: (t, token, cmd) => `CALL keyload.queue-transfer.complete.v1(source_queue => ${q(SRC)}, source_lane => ${q(t.lane)},
  transfer_id => ${q(t.id)}, receipt_token => ${q(token)}) WITH COMMAND_ID ${q(cmd)};`,
  inspect: (t) => `CALL keyload.queue-transfer.inspect.v1(source_queue => ${q(SRC)}, source_lane => ${q(t.lane)}, transfer_id => ${q(t.id)})`,
  receipt: (t) => `CALL keyload.queue-transfer.inspect-receipt.v1(destination_queue => ${q(DST)}, source_queue => ${q(SRC)},
  source_lane => ${q(t.lane)}, transfer_id => ${q(t.id)})`,
  receive: (lane, cmd) => `CALL keyload.queue.receive.v1(queue => ${q(DST)}, lane => ${q(lane)}, max => 10, lease_ms => 60000)
  WITH COMMAND_ID ${q(cmd)}`,
  ack: (tokens, cmd) => `CALL keyload.queue.ack.v1(queue => ${q(DST)}, lease_tokens => ${q(tokens.join(','))}) WITH COMMAND_ID ${q(cmd)}`,
};
// A Q1 answer: exactly one row (every alias used here answers one) or the error.
function oneRow(route, op, a) {
  if (a.code !== 'OK') return a;
  const rows = a.value?.rows;
  if (!Array.isArray(rows) || rows.length !== 1) {
    check(`${route} ${op}: exactly one row`, false, a.value);
    return { ...a, value: null };
  }
  return { ...a, rows: a.value, value: rows[0] };
}
function q1Route(name, send) {
  const route = { name, call: async (op, stmt) => oneRow(name, op, await send(op, stmt)) };
  for (const k of Object.keys(q1)) route[k] = (...args) => ({ op: k, args: q1[k](...args) });
  return route;
}
// `keyload --json sql -`: the statement on stdin (it may carry tokens).
function sqlRoute(env) {
  return q1Route('sql', async (op, stmt) => {
    const r = await run(bin('keyload'), ['--json', 'sql', '-'], { env, input: stmt, timeoutMs: 30000 });
    let j = null;
    try { j = JSON.parse(r.stdout); } catch { /* below */ }
    let a;
    if (r.code === 0 && j && Array.isArray(j.rows)) a = { code: 'OK', value: j, text: r.stdout.trim() };
    else if (r.code === 1 && j?.error) a = fromError(j.error, r.stdout.trim());
    else a = { code: null, value: null, text: r.stdout, error: { exit: r.code, stderr: r.stderr, spawn: r.error } };
    return record_answer('sql', op, a);
  });
}
// The receipt in an answer's exact text, parsed on its own: a native answer is the receipt,
// a Q1 answer {"rows": [receipt]}.
function receiptOf(a) {
  if (a.code !== 'OK') return null;
  try { const j = JSON.parse(a.text); return a.rows ? j.rows?.[0] ?? null : j; } catch { return null; }
}

// Runs one step of a route: route[step](...args) gives {op, args}; returns the answer.
const step = (route, name, ...args) => { const s = route[name](...args); return route.call(s.op, s.args); };

// ---------------------------------------------------------------- the scenario

async function main() {
  await cluster.up();
  check('RF3 cluster up (3 partitions x 3 members, a leader each)', true);

  // ---- set-up: root, the queues, the persisted administrator and its exact grants
  const rootKey = path.join(cluster.keys, 'root.key');
  const adminKey = path.join(cluster.keys, `${ADMIN}.key`);
  const rootEnv = { KEYLOAD_CLUSTER: cluster.keyed, KEYLOAD_DATABASE: DB, KEYLOAD_PRINCIPAL: 'root', KEYLOAD_KEY: rootKey };
  const kl = (args, env = rootEnv) => run(bin('keyload'), ['--json', ...args], { env, timeoutMs: 30000 });
  const [tenant, database] = DB.split('/');
  let r = await run(bin('keyload'), ['--cluster', cluster.keyed, 'admin', 'bootstrap', '--tenant', tenant, '--database', database,
    '--admin', 'root', '--key-out', rootKey]);
  if (!check(`admin bootstrap (root of ${DB})`, r.code === 0, r.stderr)) return;
  for (const [queue, partition] of [[SRC, 1], [DST, 2]]) {
    r = await kl(['queue', 'create', queue, '--partition', String(partition)]);
    check(`queue create ${queue} on partition ${partition}`, r.code === 0 && JSON.parse(r.stdout).results?.[0]?.partition === partition,
      r.stdout + r.stderr);
  }
  r = await kl(['principal', 'create', ADMIN, '--key-out', adminKey, '--role', 'database-admin']);
  if (!check(`principal create ${ADMIN} --role database-admin (a persisted administrator made by root)`, r.code === 0, r.stdout + r.stderr))
    return;
  const PERMS = ['QueuePublish', 'QueueInspect', 'QueueConsume', 'QueueAck', 'Query'];
  const grant = (perm, queue) => kl(['principal', 'grant', ADMIN, perm, '--queue', queue,
    ...(perm === 'QueueAck' ? [] : ['--fields', '*', '--headers', '*'])]);
  for (const queue of [SRC, DST]) {
    for (const perm of PERMS) {
      r = await grant(perm, queue);
      if (r.code !== 0) check(`grant ${perm} on ${queue}`, false, r.stdout + r.stderr);
    }
  }
  const show = async () => { const s = await kl(['principal', 'show', ADMIN]); return s.code === 0 ? JSON.parse(s.stdout) : null; };
  let principal = await show();
  const grantSet = (p) => (p?.grants ?? []).map((g) => `${g.database} ${g.permission} ${g.queue_pattern} [${g.fields}] [${g.headers}]`).sort();
  const wanted = [SRC, DST].flatMap((queue) => PERMS.map((perm) =>
    `${database} ${perm} ${queue} [${perm === 'QueueAck' ? '' : '*'}] [${perm === 'QueueAck' ? '' : '*'}]`)).sort();
  check(`${ADMIN}: database-admin of ${DB} with exactly QueuePublish/Inspect/Consume/Ack/Query on both queues, raw fields/headers "*"`,
    principal?.role === 'database-admin' && firstDiff(grantSet(principal), wanted) === null, { got: grantSet(principal), wanted });

  const env = { KEYLOAD_CLUSTER: cluster.keyed, KEYLOAD_DATABASE: DB, KEYLOAD_PRINCIPAL: ADMIN, KEYLOAD_KEY: adminKey,
    KEYLOAD_TIMEOUT_MS: '10000' };
  const mcpHolder = { client: null };
  const mqHolder = { client: null };
  const reopen = async () => {
    for (const c of mcpClients) await c.close().catch(() => {});
    mcpClients.clear();
    mcpHolder.client = await connect(env);
    mqHolder.client = await connect(env);
  };
  await reopen();
  const routes = [sdkRoute(env), mcpRoute(mcpHolder), sqlRoute(env),
    q1Route('mq', (op, stmt) => mcpCall(mqHolder, 'mq', 'query', { statement: stmt }, op))];
  const sdk = routes[0];
  const stats = async () => {
    const a = await sdk.call('stats', { queue: DST });
    return a.code === 'OK' ? a.value : null;
  };
  // After a cold restart: every partition has a leader (Cluster.ready) and serves again
  // (the data partitions caught up with the catalog): a fresh read of both queues answers.
  const restart = async (label) => {
    const t0 = Date.now();
    await cluster.restartCold();
    let served = false;
    for (let i = 0; i < 60 && !served; i++) {
      const a = await run(SDK, ['stats'], { env, input: JSON.stringify({ queue: SRC }), timeoutMs: 30000 });
      const b = await run(SDK, ['stats'], { env, input: JSON.stringify({ queue: DST }), timeoutMs: 30000 });
      served = a.code === 0 && b.code === 0;
      if (!served) await sleep(250);
    }
    await reopen();
    check(`${label}: cold restart of the whole cluster (every member), serving again, clients and MCP servers reopened ` +
      `(${((Date.now() - t0) / 1000).toFixed(1)} s)`, served);
  };

  // Per route: its transfers and command ids.
  const S = new Map();
  for (const [i, route] of routes.entries()) {
    S.set(route.name, {
      t: { id: uuid(), lane: route.name, body: `staged transfer via ${route.name}`, seq: i + 1 },
      fresh: { id: uuid(), lane: route.name, body: `fresh transfer via ${route.name}`, seq: 100 + i },
      cmd: { create: uuid(), tamper: uuid(), conflict: uuid(), denied: uuid(), accept: uuid(), complete: uuid(),
        receive: uuid(), ack: uuid(), afterAck: uuid(), dedup: uuid(), emptyReceive: uuid() },
    });
  }

  // ================= a. Create commits an immutable intent; cold restart; no target; replay
  for (const route of routes) {
    const s = S.get(route.name);
    const a = await step(route, 'create', s.t, s.cmd.create);
    const res = a.value?.results?.[0];
    check(`a ${route.name}: Create under its fixed command id commits an OutputPending intent with a token`,
      a.code === 'OK' && a.value.command_id === s.cmd.create && a.value.partition === 1 && res?.kind === 'transfer_created' &&
      res.state === 'OutputPending' && res.existing === false && res.generation === 1 && typeof res.intent_token === 'string' &&
      res.intent_token.length > 0, a);
    s.create = a;
    s.intent = res?.intent_token;
  }
  await restart('a');
  for (const route of routes) {
    const s = S.get(route.name);
    let a = await step(route, 'inspect', s.t);
    check(`a ${route.name}: after the cold restart OutputPending, generation 1, the committed intent token, no receipt`,
      a.code === 'OK' && a.value.state === 'OutputPending' && a.value.generation === 1 && a.value.intent_token === s.intent &&
      a.value.receipt_token === null && a.value.source?.lane === route.name && a.value.destination?.queue === DST &&
      a.value.destination?.lane === route.name && a.value.principal_id === ADMIN, a);
    s.inspectA = a.value;
    a = await step(route, 'receipt', s.t);
    check(`a ${route.name}: no target: the receipt read answers NOT_FOUND`, a.code === 'NOT_FOUND', a);
    a = await step(route, 'create', s.t, s.cmd.create);
    check(`a ${route.name}: the original Create replayed after the restart: the byte-identical receipt`,
      a.code === 'OK' && a.text === s.create.text, { replay: a.text, original: s.create.text });
  }
  // A Q1 alias runs as exactly its native batch: a route's Create replayed through another
  // route (same command id, same content) answers the stored receipt, field for field.
  for (const [owner, other] of [['sdk', 'sql'], ['mcp', 'mq'], ['sql', 'sdk'], ['mq', 'mcp']]) {
    const s = S.get(owner);
    const a = await step(routes.find((x) => x.name === other), 'create', s.t, s.cmd.create);
    const d = a.code === 'OK' ? firstDiff(receiptOf(a), receiptOf(s.create)) : a.code;
    check(`a ${owner}->${other}: ${owner}'s Create replayed through ${other}: the stored receipt, every field equal`, d === null, d);
  }
  let st = await stats();
  check('a: the destination queue holds none of these messages (0 messages on partition 2)', st?.messages === 0 && st.partition === 2, st);

  // ================= b. refusals leave the target absent and the source exactly as committed
  // After each refusal, on its route: no receipt (NOT_FOUND), the inspection equal field by
  // field to the one after the restart (but applied_index, the read position, which moves
  // with every commit of the partition), and no message on the destination queue.
  const unchanged = async (route, what) => {
    const s = S.get(route.name);
    let a = await step(route, 'receipt', s.t);
    check(`b ${route.name}: after ${what}: no target receipt (NOT_FOUND)`, a.code === 'NOT_FOUND', a);
    a = await step(route, 'inspect', s.t);
    const d = a.code === 'OK' ? firstDiff(record(a.value), record(s.inspectA)) : `inspect ${a.code}`;
    check(`b ${route.name}: after ${what}: the source exactly as committed (OutputPending, same intent)`, d === null, d);
    const st = await stats();
    check(`b ${route.name}: after ${what}: no target message (destination queue: 0 messages)`, st?.messages === 0, st);
  };
  for (const route of routes) {
    const s = S.get(route.name);
    let a = await step(route, 'accept', s.t, flipLastByte(s.intent), s.cmd.tamper);
    check(`b ${route.name}: Accept of a tampered intent token (last signature byte flipped): PERMISSION_DENIED intent_signature`,
      a.code === 'PERMISSION_DENIED' && a.error?.detail === 'intent_signature', a);
    await unchanged(route, 'the tampered intent');
    a = await step(route, 'create', s.t, s.cmd.conflict, `${s.t.body}, but another body`);
    check(`b ${route.name}: Create with the same transfer id and another body (new command id): CONFLICT`,
      a.code === 'CONFLICT', a);
    s.conflictDetail = a.error?.detail;
    await unchanged(route, 'the conflicting body');
  }
  const epoch0 = principal?.policy_epoch;
  r = await kl(['principal', 'revoke', ADMIN, 'QueuePublish', '--queue', DST]);
  principal = await show();
  const epoch1 = principal?.policy_epoch;
  check(`b: revoke ${ADMIN} QueuePublish on ${DST} (the target publisher): its policy epoch moves`,
    r.code === 0 && epoch1 > epoch0 && !grantSet(principal).some((g) => g.startsWith(`${database} QueuePublish ${DST} `)) &&
    grantSet(principal).length === wanted.length - 1, { r, epoch0, epoch1 });
  for (const route of routes) {
    const s = S.get(route.name);
    const a = await step(route, 'accept', s.t, s.intent, s.cmd.denied);
    check(`b ${route.name}: Accept by the freshly revoked target publisher: PERMISSION_DENIED grant:QueuePublish`,
      a.code === 'PERMISSION_DENIED' && a.error?.detail === 'grant:QueuePublish', a);
    await unchanged(route, 'the revoked publisher');
  }

  // ================= c. restore the publisher; Accept under new command ids; cold restart
  r = await grant('QueuePublish', DST);
  principal = await show();
  const epoch2 = principal?.policy_epoch;
  check(`c: QueuePublish on ${DST} granted again: the policy epoch moves again, the grants are the original set`,
    r.code === 0 && epoch2 > epoch1 && firstDiff(grantSet(principal), wanted) === null, { epoch1, epoch2 });
  for (const route of routes) {
    const s = S.get(route.name);
    let a = await step(route, 'accept', s.t, s.intent, s.cmd.denied);
    check(`c ${route.name}: the denied Accept's command id replayed after the restore: the same committed refusal ` +
      '(restoring policy mints no new command id)', a.code === 'PERMISSION_DENIED' && a.error?.detail === 'grant:QueuePublish', a);
    a = await step(route, 'accept', s.t, s.intent, s.cmd.accept);
    const res = a.value?.results?.[0];
    check(`c ${route.name}: Accept under a new command id enqueues once on partition 2 (the native receipt)`,
      a.code === 'OK' && a.value.command_id === s.cmd.accept && a.value.partition === 2 && res?.kind === 'transfer_accepted' &&
      res.deduplicated === false && res.partition === 2 && res.lane === route.name, a);
    s.accept = a;
    a = await step(route, 'receipt', s.t);
    const tc = a.value?.target_commit;
    check(`c ${route.name}: the signed target proof: a receipt token naming the Accept's commit`,
      a.code === 'OK' && typeof a.value.receipt_token === 'string' && a.value.receipt_token.length > 0 &&
      tc?.message_id === res?.message_id && tc?.partition === res?.partition && tc?.term === res?.term && tc?.index === res?.index, a);
    s.proof = a.value?.receipt_token;
  }
  await restart('c');
  for (const route of routes) {
    const s = S.get(route.name);
    let a = await step(route, 'inspect', s.t);
    check(`c ${route.name}: after the cold restart the source is still OutputPending (no receipt recorded)`,
      a.code === 'OK' && a.value.state === 'OutputPending' && a.value.receipt_token === null, a);
    a = await step(route, 'accept', s.t, s.intent, s.cmd.accept);
    check(`c ${route.name}: the Accept replayed: the identical receipt`, a.code === 'OK' && a.text === s.accept.text,
      { replay: a.text, original: s.accept.text });
    a = await step(route, 'receipt', s.t);
    check(`c ${route.name}: the target proof survives the restart byte for byte`, a.code === 'OK' && a.value.receipt_token === s.proof, a);
  }

  // ================= d. Complete from that actual receipt token; cold restart; Delivered
  for (const route of routes) {
    const s = S.get(route.name);
    const a = await step(route, 'complete', s.t, s.proof, s.cmd.complete);
    const res = a.value?.results?.[0];
    check(`d ${route.name}: Complete with the retained target receipt token: Delivered`,
      a.code === 'OK' && a.value.command_id === s.cmd.complete && a.value.partition === 1 && res?.kind === 'transfer_completed' &&
      res.state === 'Delivered' && res.already === false, a);
    s.complete = a;
  }
  await restart('d');
  for (const route of routes) {
    const s = S.get(route.name);
    let a = await step(route, 'inspect', s.t);
    check(`d ${route.name}: after the cold restart Delivered, with the intent token and the target's receipt token`,
      a.code === 'OK' && a.value.state === 'Delivered' && a.value.intent_token === s.intent && a.value.receipt_token === s.proof &&
      a.value.history?.map((h) => h.event).join() === 'IntentCreated,ReceiptVerified', a);
    a = await step(route, 'accept', s.t, s.intent, s.cmd.accept);
    check(`d ${route.name}: the original Accept replayed: the identical receipt`, a.code === 'OK' && a.text === s.accept.text, a);
    a = await step(route, 'complete', s.t, s.proof, s.cmd.complete);
    check(`d ${route.name}: the original Complete replayed: the identical receipt`, a.code === 'OK' && a.text === s.complete.text, a);
  }

  // Every route reads every route's transfer the same: the four inspections of each
  // transfer, parsed independently, equal field by field (but the read position).
  for (const owner of routes) {
    const t = S.get(owner.name).t;
    const seen = [];
    for (const route of routes) seen.push([route.name, await step(route, 'inspect', t)]);
    const base = seen[0][1];
    const diffs = seen.slice(1).map(([n, a]) => (a.code === 'OK' && base.code === 'OK' ? firstDiff(record(base.value), record(a.value)) : `${n} ${a.code}`))
      .filter((d) => d !== null);
    check(`d: ${owner.name}'s transfer inspected through all four routes: the same record field by field`, diffs.length === 0, diffs);
  }

  // ================= e. the historical Create under the changed policy epoch
  for (const route of routes) {
    const s = S.get(route.name);
    let a = await step(route, 'create', s.t, s.cmd.create);
    check(`e ${route.name}: the historical Create (same command id and content) now PERMISSION_DENIED stale_authority, ` +
      'saying the original committed (at its receipt\'s index)', a.code === 'PERMISSION_DENIED' && a.error?.detail === 'stale_authority' &&
      a.error.message.includes(`original command committed (at index ${s.create.value.index})`), a);
    a = await step(route, 'inspect', s.t);
    check(`e ${route.name}: the original intent and the receipt evidence remain (same tokens, Delivered)`,
      a.code === 'OK' && a.value.state === 'Delivered' && a.value.intent_token === s.intent && a.value.receipt_token === s.proof, a);
    a = await step(route, 'receipt', s.t);
    check(`e ${route.name}: the target receipt remains byte for byte`, a.code === 'OK' && a.value.receipt_token === s.proof, a);
  }

  // ================= f. receive and ACK the target delivery; a new Accept deduplicates
  for (const route of routes) {
    const s = S.get(route.name);
    const a = await step(route, 'receive', route.name, s.cmd.receive);
    const msgs = a.value?.results?.[0]?.messages;
    const m = msgs?.[0];
    check(`f ${route.name}: receive on its destination lane: the transferred message, once, with its header and field`,
      a.code === 'OK' && msgs?.length === 1 && m.body_utf8 === s.t.body && m.headers?.route === route.name &&
      m.fields?.seq?.value === s.t.seq && m.message_id === s.accept.value.results[0].message_id, a);
    s.lease = m?.lease_token;
  }
  // TASK-XFER-RF3-RECEIPT-VALUE: one route acks under command id C; another route replays
  // the identical ack (same command id and content) and gets the stored receipt; both
  // canonical JSON texts are parsed independently and compared field by field.
  const pairs = [['sdk', 'mcp'], ['mcp', 'sdk'], ['sql', 'mq'], ['mq', 'sql']];
  const byName = Object.fromEntries(routes.map((x) => [x.name, x]));
  for (const [first, replayer] of pairs) {
    const s = S.get(first);
    const a = await step(byName[first], 'ack', [s.lease], s.cmd.ack);
    const res = a.value?.results;
    check(`f ${first}: ACK of the target delivery under command id C: one acked mutation`,
      a.code === 'OK' && a.value.command_id === s.cmd.ack && a.value.partition === 2 && res?.length === 1 &&
      res[0].kind === 'acked' && res[0].count === 1, a);
    const b = await step(byName[replayer], 'ack', [s.lease], s.cmd.ack);
    const x = receiptOf(a), y = receiptOf(b);
    const d = x && y ? firstDiff(x, y) : `first ${a.code}, replay ${b.code}`;
    check(`f ${first}->${replayer}: the same ACK replayed through ${replayer}: every field of the independently parsed ` +
      'receipts equal (command id preserved, one mutation, same content)', d === null && y?.command_id === s.cmd.ack &&
      y?.results?.length === 1, d ?? undefined);
    const c = await step(byName[first], 'ack', [s.lease], s.cmd.ack);
    check(`f ${first}: exact duplicate replay on its own route: the identical receipt text`, c.code === 'OK' && c.text === a.text,
      { replay: c.text, original: a.text });
    const e = await step(byName[first], 'receive', first, s.cmd.afterAck);
    check(`f ${first}: after the ACK a receive on its destination lane returns nothing`,
      e.code === 'OK' && Array.isArray(e.value.results?.[0]?.messages) && e.value.results[0].messages.length === 0, e);
  }
  st = await stats();
  check('f: the target ACKs took effect: the destination queue holds 0 messages', st?.messages === 0 && st?.in_flight === 0, st);
  for (const route of routes) {
    const s = S.get(route.name);
    let a = await step(route, 'accept', s.t, s.intent, s.cmd.dedup);
    const res = a.value?.results?.[0];
    check(`f ${route.name}: a NEW Accept (new command id) against the original intent: deduplicated, the original message id`,
      a.code === 'OK' && a.value.command_id === s.cmd.dedup && res?.kind === 'transfer_accepted' && res.deduplicated === true &&
      res.message_id === s.accept.value.results[0].message_id, a);
    a = await step(route, 'receive', route.name, s.cmd.emptyReceive);
    check(`f ${route.name}: no resurrected message: a receive on its destination lane returns nothing`,
      a.code === 'OK' && Array.isArray(a.value.results?.[0]?.messages) && a.value.results[0].messages.length === 0, a);
  }
  st = await stats();
  check('f: the destination queue still holds 0 messages', st?.messages === 0, st);

  // ================= g. a fresh independent transfer end to end on every route
  for (const route of routes) {
    const s = S.get(route.name);
    const f = s.fresh;
    let a = await step(route, 'create', f, uuid());
    const intent = a.value?.results?.[0]?.intent_token;
    check(`g ${route.name}: fresh Create: OutputPending`, a.code === 'OK' && a.value.results?.[0]?.state === 'OutputPending', a);
    a = await step(route, 'accept', f, intent, uuid());
    const msgId = a.value?.results?.[0]?.message_id;
    check(`g ${route.name}: fresh Accept: enqueued once`, a.code === 'OK' && a.value.results?.[0]?.deduplicated === false, a);
    a = await step(route, 'receipt', f);
    const proof = a.value?.receipt_token;
    check(`g ${route.name}: fresh receipt read: the target proof`, a.code === 'OK' && typeof proof === 'string', a);
    a = await step(route, 'complete', f, proof, uuid());
    check(`g ${route.name}: fresh Complete: Delivered`, a.code === 'OK' && a.value.results?.[0]?.state === 'Delivered', a);
    a = await step(route, 'inspect', f);
    check(`g ${route.name}: fresh inspect: Delivered with its own intent and receipt tokens`, a.code === 'OK' &&
      a.value.state === 'Delivered' && a.value.intent_token === intent && a.value.receipt_token === proof, a);
    a = await step(route, 'receive', route.name, uuid());
    const m = a.value?.results?.[0]?.messages;
    check(`g ${route.name}: the fresh message arrives once on its destination lane`, a.code === 'OK' && m?.length === 1 &&
      m[0].body_utf8 === f.body && m[0].message_id === msgId, a);
    a = await step(route, 'ack', [m?.[0]?.lease_token ?? ''], uuid());
    check(`g ${route.name}: and is acknowledged`, a.code === 'OK' && a.value.results?.[0]?.count === 1, a);
  }
  st = await stats();
  check('g: the destination queue ends empty', st?.messages === 0, st);

  // ================= across the whole run
  const unknown = answers.filter((x) => !CODES.has(x.code));
  check(`no unknown response manufactured: all ${answers.length} answers are OK or a named code`, unknown.length === 0, unknown);
  const uncertain = answers.filter((x) => x.code === 'UNKNOWN_WRITE_OUTCOME' || x.code === 'UNAVAILABLE');
  check('nothing was cut, so no answer was UNKNOWN_WRITE_OUTCOME or UNAVAILABLE', uncertain.length === 0, uncertain);
  const refusals = answers.filter((x) => x.code !== 'OK').map((x) => `${x.route}/${x.op}:${x.code}(${x.detail})`);
  console.log(`# refusals seen: ${refusals.join(' ')}`);
  console.log(`# conflicting-body refusal detail per route: ${routes.map((x) => `${x.name}=${S.get(x.name).conflictDetail}`).join(' ')}`);
  console.log(`# scenario took ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

let okAll = false;
try {
  await main();
} catch (e) {
  check('no exception', false, e?.stack ?? String(e));
} finally {
  clearTimeout(timer);
  await teardown();
  okAll = summary();
}
process.exit(okAll ? 0 : 1);
