// bin/keyload-mcp driven by the official MCP TypeScript SDK (Client + StdioClientTransport)
// against a real RF3 cluster (the official MCP client route, ARCHITECTURE.md "Processes"):
// negotiation, tools/list schemas, every tool called with its effect checked, tool failures
// as isError results with the KeyLoad code, and unknown tools / bad arguments as JSON-RPC
// errors. Everything it starts is stopped on exit, failure or timeout (by pid).
import crypto from 'node:crypto';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { Cluster, bin, check, root, run, summary } from './lib.mjs';

const BUDGET_MS = 240000; // under the suite's 300 s, so that teardown still runs
const cluster = new Cluster();
const clients = [];

async function teardown() {
  for (const c of clients) await c.close().catch(() => {});
  await cluster.down();
}
const timer = setTimeout(async () => {
  check(`the whole test within ${BUDGET_MS / 1000} s`, false);
  await teardown();
  summary();
  process.exit(1);
}, BUDGET_MS);
for (const sig of ['SIGINT', 'SIGTERM'])
  process.on(sig, async () => { await teardown(); process.exit(1); });

// An MCP client session with keyload-mcp acting as principal `who` (key file `key`).
async function connect(who, key) {
  const transport = new StdioClientTransport({
    command: bin('keyload-mcp'),
    args: [],
    cwd: root,
    stderr: 'pipe',
    env: { KEYLOAD_CLUSTER: cluster.keyed, KEYLOAD_DATABASE: 'default/default', KEYLOAD_PRINCIPAL: who,
           KEYLOAD_KEY: key, KEYLOAD_TIMEOUT_MS: '10000' },
  });
  const logs = [];
  transport.stderr?.on('data', (d) => logs.push(String(d)));
  let negotiated = null; // the SDK hands the negotiated version to the transport
  transport.setProtocolVersion = (v) => { negotiated = v; };
  const client = new Client({ name: 'keyload-mcp-test', version: '1.0.0' });
  await client.connect(transport);
  clients.push(client);
  return { client, negotiated, logs };
}

// tools/call; checks the result shape every time: text content == structuredContent.
async function call(client, name, args) {
  const r = await client.callTool({ name, arguments: args });
  let same = false;
  try { same = JSON.stringify(JSON.parse(r.content[0].text)) === JSON.stringify(r.structuredContent); } catch { /* no */ }
  if (!same) check(`${name}: text content and structuredContent are the same object`, false, r);
  return r;
}
const okOf = (r) => (r.isError ? null : r.structuredContent);
const errCode = (r) => (r.isError ? r.structuredContent?.error?.code : null);
async function rpcError(client, name, args) {
  try {
    await client.callTool({ name, arguments: args });
    return 'no error';
  } catch (e) {
    return e instanceof McpError ? e.code : `not an McpError: ${e}`;
  }
}

async function main() {
  await cluster.up();
  check('RF3 cluster up (3 partitions x 3 members, a leader each)', true);
  const rootKey = path.join(cluster.keys, 'root.key');
  const boot = await run(bin('keyload'), ['--cluster', cluster.keyed, 'admin', 'bootstrap', '--tenant', 'default',
    '--database', 'default', '--admin', 'root', '--key-out', rootKey]);
  if (!check('admin bootstrap (root of default/default)', boot.code === 0, boot.stderr)) return;

  // ---- initialize, tools/list
  const { client, negotiated, logs } = await connect('root', rootKey);
  check('initialize: the SDK\'s newest protocol version 2025-11-25 negotiated', negotiated === '2025-11-25', negotiated);
  check('initialize: serverInfo names keyload-mcp', client.getServerVersion()?.name === 'keyload-mcp', client.getServerVersion());
  check('initialize: the tools capability', client.getServerCapabilities()?.tools !== undefined, client.getServerCapabilities());
  await client.ping();
  check('ping answered', true);
  const { tools } = await client.listTools();
  const want = ['queue_create', 'queue_delete', 'queue_stats', 'enqueue', 'receive', 'ack', 'release',
    'database_create', 'database_limits', 'database_show', 'database_list', 'queue_list', 'principal_list', 'principal_create', 'principal_show', 'principal_grant',
    'principal_revoke', 'principal_set_key', 'transfer_create', 'transfer_accept', 'transfer_complete',
    'transfer_inspect', 'transfer_receipt', 'transfer_pending', 'transfer_pause', 'transfer_resume',
    'transfer_token_describe', 'transfer_failure', 'transfer_complete_failure', 'transfer_advance', 'transfer_repair', 'cluster_status', 'query'];
  const names = tools.map((t) => t.name);
  check('tools/list names every operation', want.every((n) => names.includes(n)), names);
  check('every tool has an object inputSchema with required[] and additionalProperties false',
    tools.every((t) => t.inputSchema?.type === 'object' && Array.isArray(t.inputSchema.required) &&
      t.inputSchema.additionalProperties === false && typeof t.inputSchema.properties === 'object'),
    tools.filter((t) => t.inputSchema?.additionalProperties !== false).map((t) => t.name));
  // query writes too (a mutating CALL) but names its command id in the statement.
  check('every mutation takes an optional command_id',
    tools.filter((t) => !t.annotations?.readOnlyHint && t.name !== 'query').every((t) => t.inputSchema.properties.command_id &&
      !t.inputSchema.required.includes('command_id')));
  check('query is not announced read-only', tools.find((t) => t.name === 'query')?.annotations?.readOnlyHint === false);
  {
    const p = tools.find((t) => t.name === 'database_limits')?.inputSchema?.properties?.max_transfer_accept_attempts;
    check('database_limits max_transfer_accept_attempts: schema type [integer, null]',
      JSON.stringify(p?.type) === '["integer","null"]' && p.minimum === 1, p);
  }

  // ---- queues on different partitions
  let r = okOf(await call(client, 'queue_create', { queue: 'src', partition: 1 }));
  check('queue_create src on partition 1', r?.results?.[0]?.kind === 'queue_created' && r.results[0].partition === 1, r);
  r = okOf(await call(client, 'queue_create', { queue: 'dst', partition: 2, max_messages: 100 }));
  check('queue_create dst on partition 2', r?.results?.[0]?.kind === 'queue_created' && r.results[0].partition === 2, r);
  r = okOf(await call(client, 'queue_create', { queue: 'tmp' }));
  check('queue_create tmp (placement picked by partition 0)', r?.results?.[0]?.kind === 'queue_created', r);
  r = okOf(await call(client, 'queue_delete', { queue: 'tmp' }));
  check('queue_delete tmp', r?.results?.[0]?.kind === 'queue_deleted', r);
  r = await call(client, 'queue_stats', { queue: 'tmp' });
  check('queue_stats of the deleted queue: isError NOT_FOUND', errCode(r) === 'NOT_FOUND', r);

  // ---- messages and leases
  const cmd = crypto.randomUUID();
  const enq = { queue: 'src', lane: 'eu', body: 'hello from mcp', headers: { source: 'mcp' }, fields: ['n:int=7'], command_id: cmd };
  const first = await call(client, 'enqueue', enq);
  r = okOf(first);
  check('enqueue: enqueued under the given command_id', r?.results?.[0]?.kind === 'enqueued' && r.command_id === cmd, r);
  const again = await call(client, 'enqueue', enq);
  check('enqueue replayed with the same command_id: the identical receipt', again.content[0].text === first.content[0].text);
  r = await call(client, 'enqueue', { ...enq, body: 'other' });
  check('the same command_id with another body: isError CONFLICT', errCode(r) === 'CONFLICT', r);
  r = okOf(await call(client, 'queue_stats', { queue: 'src' }));
  check('queue_stats src: 1 message on partition 1', r?.messages === 1 && r.partition === 1 && r.queue === 'src', r);
  r = okOf(await call(client, 'receive', { queue: 'src', lane: 'eu', max: 5, lease_ms: 60000 }));
  let m = r?.results?.[0]?.messages?.[0];
  check('receive: the body, headers and fields enqueued', m?.body_utf8 === 'hello from mcp' && m.headers?.source === 'mcp' &&
    m.fields?.n?.value === 7 && m.delivery_count === 1, r);
  r = okOf(await call(client, 'release', { queue: 'src', lease_tokens: [m.lease_token] }));
  check('release', r?.results?.[0]?.kind === 'released', r);
  r = okOf(await call(client, 'receive', { queue: 'src', lane: 'eu' }));
  m = r?.results?.[0]?.messages?.[0];
  check('receive after release: delivered again (delivery 2)', m?.delivery_count === 2, r);
  r = okOf(await call(client, 'ack', { queue: 'src', lease_tokens: [m.lease_token] }));
  check('ack', r?.results?.[0]?.kind === 'acked' && r.results[0].count === 1, r);
  r = okOf(await call(client, 'queue_stats', { queue: 'src' }));
  check('queue_stats after ack: 0 messages', r?.messages === 0, r);

  // ---- long poll: a receive that leases nothing commits nothing; wait_ms waits for a message
  let t0 = Date.now();
  r = okOf(await call(client, 'receive', { queue: 'src', lane: 'eu', wait_ms: 500 }));
  check('receive wait_ms 500 on an empty lane: no message, nothing committed (index 0), after the wait',
    r?.results?.[0]?.messages?.length === 0 && r.index === 0 && Date.now() - t0 >= 450, { r, ms: Date.now() - t0 });
  const other = (await connect('root', rootKey)).client;
  t0 = Date.now();
  const waiting = call(client, 'receive', { queue: 'src', lane: 'eu', wait_ms: 15000 });
  await new Promise((res) => setTimeout(res, 500));
  okOf(await call(other, 'enqueue', { queue: 'src', lane: 'eu', body: 'while waiting' }));
  r = okOf(await waiting);
  m = r?.results?.[0]?.messages?.[0];
  check('receive wait_ms 15000: the message enqueued meanwhile, long before the wait ends',
    m?.body_utf8 === 'while waiting' && r.index > 0 && Date.now() - t0 < 10000, { r, ms: Date.now() - t0 });
  okOf(await call(client, 'ack', { queue: 'src', lease_tokens: [m.lease_token] }));
  check('wait_ms over 30000: -32602', await rpcError(client, 'receive', { queue: 'src', wait_ms: 30001 }) === ErrorCode.InvalidParams);

  // ---- grants the transfer checks need (an administrator's data grants are checked too)
  for (const p of ['QueuePublish', 'QueueConsume', 'QueueInspect']) {
    r = okOf(await call(client, 'principal_grant', { principal_id: 'root', permission: p, queue_pattern: '*', fields: ['*'], headers: ['*'] }));
    check(`principal_grant root ${p} on *`, r?.results?.[0]?.kind === 'principal_changed', r);
  }
  r = okOf(await call(client, 'principal_grant', { principal_id: 'root', permission: 'QueueAck', queue_pattern: '*' }));
  check('principal_grant root QueueAck on *', r?.results?.[0]?.kind === 'principal_changed', r);

  // ---- a transfer: create -> accept -> receipt -> complete -> inspect Delivered
  const id = crypto.randomUUID();
  r = okOf(await call(client, 'transfer_create', { source_queue: 'src', transfer_id: id, dest_queue: 'dst', body: 'moved by mcp', headers: { k: 'v' } }));
  const created = r?.results?.[0];
  check('transfer_create: OutputPending with an intent token', created?.kind === 'transfer_created' &&
    created.state === 'OutputPending' && typeof created.intent_token === 'string' && created.intent_token.length > 0, r);
  r = okOf(await call(client, 'transfer_pending', { source_queue: 'src' }));
  check('transfer_pending lists it, without tokens', r?.items?.length === 1 && r.items[0].transfer_id === id &&
    !('intent_token' in r.items[0]), r);
  r = okOf(await call(client, 'transfer_token_describe', { token: created.intent_token }));
  check('transfer_token_describe: an intent for this transfer', r?.purpose === 'TransferIntent' && r.transfer_id === id, r);
  r = await call(client, 'transfer_receipt', { dest_queue: 'dst', source_queue: 'src', transfer_id: id });
  check('transfer_receipt before accept: isError NOT_FOUND', errCode(r) === 'NOT_FOUND', r);
  r = okOf(await call(client, 'transfer_accept', { dest_queue: 'dst', intent_token: created.intent_token }));
  check('transfer_accept: enqueued on partition 2', r?.results?.[0]?.kind === 'transfer_accepted' && r.results[0].partition === 2 &&
    r.results[0].deduplicated === false, r);
  r = okOf(await call(client, 'transfer_accept', { dest_queue: 'dst', intent_token: created.intent_token }));
  check('transfer_accept again (new command id): deduplicated', r?.results?.[0]?.deduplicated === true, r);
  r = okOf(await call(client, 'transfer_receipt', { dest_queue: 'dst', source_queue: 'src', transfer_id: id }));
  const receiptToken = r?.receipt_token;
  check('transfer_receipt: a receipt token', typeof receiptToken === 'string' && receiptToken.length > 0, r);
  r = okOf(await call(client, 'transfer_complete', { source_queue: 'src', transfer_id: id, receipt_token: receiptToken }));
  check('transfer_complete: Delivered', r?.results?.[0]?.kind === 'transfer_completed' && r.results[0].state === 'Delivered', r);
  r = okOf(await call(client, 'transfer_inspect', { source_queue: 'src', transfer_id: id }));
  check('transfer_inspect: Delivered, with both tokens and the history', r?.state === 'Delivered' &&
    r.receipt_token === receiptToken && r.intent_token === created.intent_token && r.history?.length >= 2, r);
  r = okOf(await call(client, 'transfer_pending', { partition: 1 }));
  check('transfer_pending of partition 1: nothing pending', r?.items?.length === 0, r);
  r = okOf(await call(client, 'receive', { queue: 'dst', max: 10 }));
  m = r?.results?.[0]?.messages;
  check('receive on dst: the transferred message, once', m?.length === 1 && m[0].body_utf8 === 'moved by mcp' && m[0].headers?.k === 'v', r);

  // ---- pause / resume
  r = okOf(await call(client, 'transfer_pause', { source_queue: 'src' }));
  check('transfer_pause src', r?.results?.[0]?.kind === 'transfers_paused' && r.results[0].paused === true, r);
  r = await call(client, 'transfer_create', { source_queue: 'src', transfer_id: crypto.randomUUID(), dest_queue: 'dst', body: 'x' });
  check('transfer_create while paused: isError FAILED_PRECONDITION', errCode(r) === 'FAILED_PRECONDITION', r);
  r = okOf(await call(client, 'transfer_resume', { source_queue: 'src' }));
  check('transfer_resume src', r?.results?.[0]?.paused === false && r.results[0].changed === true, r);

  // ---- Q1 through the MCP query tool (the second Q1 route; `keyload sql` is the first)
  r = await call(client, 'query', { statement: `CALL keyload.queue-transfer.inspect.v1(source_queue => 'src', transfer_id => '${id}')` });
  check('query without the Query grant: isError PERMISSION_DENIED grant:Query', errCode(r) === 'PERMISSION_DENIED' &&
    JSON.parse(r.content[0].text).error.detail === 'grant:Query', r);
  okOf(await call(client, 'principal_grant', { principal_id: 'root', permission: 'Query', queue_pattern: '*' }));
  r = okOf(await call(client, 'query', { statement: `CALL keyload.queue-transfer.inspect.v1(source_queue => 'src', transfer_id => '${id}')` }));
  const native = okOf(await call(client, 'transfer_inspect', { source_queue: 'src', transfer_id: id }));
  check('query inspect.v1: one row, the native transfer_inspect object field for field',
    r?.rows?.length === 1 && JSON.stringify(r.rows[0]) === JSON.stringify(native), r);
  const qcmd = crypto.randomUUID();
  const stmt = `CALL keyload.queue.enqueue.v1(queue => 'src', body => 'via query') WITH COMMAND_ID '${qcmd}'`;
  const q1 = okOf(await call(client, 'query', { statement: stmt }));
  const q2 = okOf(await call(client, 'query', { statement: stmt }));
  check('query enqueue.v1 under WITH COMMAND_ID: a receipt, replayed identically', q1?.rows?.[0]?.command_id === qcmd &&
    q1.rows[0].results?.[0]?.kind === 'enqueued' && JSON.stringify(q1) === JSON.stringify(q2), q1);
  r = await call(client, 'query', { statement: 'CALL nope(' });
  check('query with a syntax error: isError INVALID_ARGUMENT', errCode(r) === 'INVALID_ARGUMENT', r);

  // ---- KL-6: a capacity failure, its witness and the attempt advance, all through MCP
  r = okOf(await call(client, 'database_limits', { max_transfer_accept_attempts: 3 }));
  check('database_limits: MaxQueueTransferAcceptAttempts 3', r?.results?.[0]?.kind === 'database_limits_set', r);
  r = okOf(await call(client, 'queue_create', { queue: 'full', partition: 2, max_messages: 1 }));
  check('queue_create full (one message) on partition 2', r?.results?.[0]?.kind === 'queue_created', r);
  okOf(await call(client, 'enqueue', { queue: 'full', body: 'filler' }));
  const id2 = crypto.randomUUID();
  r = okOf(await call(client, 'transfer_create', { source_queue: 'src', transfer_id: id2, dest_queue: 'full', body: 'retried by mcp' }));
  const intent2 = r?.results?.[0]?.intent_token;
  const acc2 = crypto.randomUUID();
  r = await call(client, 'transfer_accept', { dest_queue: 'full', intent_token: intent2, command_id: acc2 });
  check('transfer_accept into a full queue: isError RESOURCE_EXHAUSTED', errCode(r) === 'RESOURCE_EXHAUSTED', r);
  r = okOf(await call(client, 'transfer_failure', { dest_queue: 'full', intent_token: intent2, failed_command_id: acc2 }));
  check('transfer_failure while still full: Unchanged, no witness', r?.verdict === 'Unchanged' && !r.witness_token &&
    r.failure_code === 'RESOURCE_EXHAUSTED', r);
  r = okOf(await call(client, 'receive', { queue: 'full' }));
  okOf(await call(client, 'ack', { queue: 'full', lease_tokens: [r?.results?.[0]?.messages?.[0]?.lease_token] }));
  r = okOf(await call(client, 'transfer_failure', { dest_queue: 'full', intent_token: intent2, failed_command_id: acc2 }));
  const witness = r?.witness_token;
  check('transfer_failure after room was made: WitnessIssued', r?.verdict === 'WitnessIssued' && typeof witness === 'string', r);
  r = await call(client, 'transfer_repair', { source_queue: 'src', transfer_id: id2, witness_token: witness });
  check('transfer_repair with a capacity witness: isError FAILED_PRECONDITION', errCode(r) === 'FAILED_PRECONDITION', r);
  r = okOf(await call(client, 'transfer_advance', { source_queue: 'src', transfer_id: id2, witness_token: witness }));
  const adv = r?.results?.[0];
  check('transfer_advance: generation 2 with its token', adv?.kind === 'transfer_advanced' && adv.generation === 2 &&
    typeof adv.intent_token === 'string' && adv.intent_token !== intent2, r);
  r = okOf(await call(client, 'query', { statement: `CALL keyload.queue-transfer.advance-attempt.v1(source_queue => 'src', transfer_id => '${id2}', witness_token => '${witness}')` }));
  check('query advance-attempt.v1 with the same witness: the advance already made, generation 2',
    r?.rows?.[0]?.results?.[0]?.kind === 'transfer_advanced' && r.rows[0].results[0].already === true &&
    r.rows[0].results[0].generation === 2, r);
  r = await call(client, 'query', { statement: `CALL keyload.queue-transfer.advance-repair.v1(source_queue => 'src', transfer_id => '${id2}', witness_token => '${witness}')` });
  check('query advance-repair.v1 with a capacity witness: isError FAILED_PRECONDITION', errCode(r) === 'FAILED_PRECONDITION', r);
  r = okOf(await call(client, 'transfer_inspect', { source_queue: 'src', transfer_id: id2 }));
  check('transfer_inspect: generation 2, current_token is the advance\'s', r?.generation === 2 &&
    r.current_token === adv.intent_token && r.attempt_advances === 1, r);
  r = okOf(await call(client, 'transfer_accept', { dest_queue: 'full', intent_token: adv.intent_token }));
  check('transfer_accept of generation 2: enqueued once', r?.results?.[0]?.deduplicated === false, r);
  r = okOf(await call(client, 'transfer_failure', { dest_queue: 'full', intent_token: intent2, failed_command_id: acc2 }));
  check('transfer_failure after the Accept: ReceiptExists (the receipt wins)', r?.verdict === 'ReceiptExists' &&
    typeof r.receipt_token === 'string', r);
  r = okOf(await call(client, 'queue_stats', { queue: 'full' }));
  check('full holds exactly the transferred message', r?.messages === 1, r);
  r = await call(client, 'transfer_complete_failure', { source_queue: 'src', transfer_id: id2,
    receipt_token: witness, failed_command_id: acc2 });
  check('transfer_complete_failure for a command that was no Complete: isError NOT_FOUND or FAILED_PRECONDITION',
    ['NOT_FOUND', 'FAILED_PRECONDITION'].includes(errCode(r)), r);

  // ---- databases
  r = okOf(await call(client, 'database_limits', { max_scan_records: 5000 }));
  check('database_limits: MaxScanRecords 5000', r?.results?.[0]?.kind === 'database_limits_set' &&
    r.results[0].limits.max_scan_records === 5000, r);
  r = okOf(await call(client, 'database_show', {}));
  check('database_show: MaxScanRecords 5000 and the accept attempts 3 set before are both kept',
    r?.databases?.[0]?.limits?.max_scan_records === 5000 && r.databases[0].limits.max_queue_transfer_accept_attempts === 3, r);
  r = await call(client, 'database_limits', {});
  check('database_limits without a limit: isError INVALID_ARGUMENT', errCode(r) === 'INVALID_ARGUMENT', r);
  // null sets the accept-attempts limit back to none (the CLI's `null`); absence keeps it
  r = okOf(await call(client, 'database_limits', { max_transfer_accept_attempts: null }));
  check('database_limits max_transfer_accept_attempts null: accepted', r?.results?.[0]?.kind === 'database_limits_set', r);
  r = okOf(await call(client, 'database_show', {}));
  check('database_show after null: no accept-attempts limit, MaxScanRecords 5000 kept',
    r?.databases?.[0]?.limits?.max_scan_records === 5000 &&
    r.databases[0].limits.max_queue_transfer_accept_attempts == null, r);
  check('database_limits max_scan_records null (not nullable): -32602',
    await rpcError(client, 'database_limits', { max_scan_records: null }) === ErrorCode.InvalidParams);
  {
    const seen = [];
    let cursor, pages = 0;
    do {
      r = okOf(await call(client, 'queue_list', cursor ? { max: 1, cursor } : { max: 1 }));
      seen.push(...(r?.queues ?? []).map((q) => q.queue));
      cursor = r?.next_cursor ?? undefined;
      pages++;
    } while (cursor && pages < 50);
    check('queue_list one per page: every queue once, in name order, src and full among them',
      seen.length === pages && new Set(seen).size === seen.length && seen.includes('src') && seen.includes('full') &&
      JSON.stringify(seen) === JSON.stringify([...seen].sort()), seen);
  }
  r = okOf(await call(client, 'database_create', { database: 'default/other' }));
  check('database_create default/other', r?.results?.[0]?.kind === 'database_created', r);

  // ---- principals, and a principal without grants
  const bob = await cluster.keygen('bob.key');
  r = okOf(await call(client, 'principal_create', { principal_id: 'bob', public_key: bob.pub }));
  check('principal_create bob', r?.results?.[0]?.kind === 'principal_changed' && r.results[0].principal_id === 'bob', r);
  const shown = await call(client, 'principal_show', { principal_id: 'bob' });
  r = okOf(shown);
  check('principal_show bob: no role, his public key', r?.role === 'none' && r.public_key === bob.pub, r);
  const cli = await run(bin('keyload'), ['--cluster', cluster.keyed, '--principal', 'root', '--key', rootKey, '--json', 'principal', 'show', 'bob']);
  check('CLI --json and MCP print the same canonical JSON (principal show)', cli.stdout.trim() === shown.content[0].text,
    { cli: cli.stdout.trim(), mcp: shown.content[0].text });
  const asBob = (await connect('bob', bob.file)).client;
  r = await call(asBob, 'enqueue', { queue: 'src', body: 'from bob' });
  check('bob without a grant: isError PERMISSION_DENIED grant:QueuePublish', errCode(r) === 'PERMISSION_DENIED' &&
    r.structuredContent.error.detail === 'grant:QueuePublish' && typeof r.structuredContent.error.message === 'string', r);
  check('the refusal does not echo the body', !r.content[0].text.includes('from bob'));
  r = okOf(await call(client, 'principal_grant', { principal_id: 'bob', permission: 'QueuePublish', queue_pattern: 'src' }));
  check('principal_grant bob QueuePublish on src', r?.results?.[0]?.changed === true, r);
  r = okOf(await call(asBob, 'enqueue', { queue: 'src', body: 'from bob' }));
  check('bob enqueues after the grant', r?.results?.[0]?.kind === 'enqueued', r);
  r = okOf(await call(client, 'principal_revoke', { principal_id: 'bob', permission: 'QueuePublish', queue_pattern: 'src' }));
  check('principal_revoke bob', r?.results?.[0]?.changed === true, r);
  r = await call(asBob, 'enqueue', { queue: 'src', body: 'again' });
  check('bob after the revoke: isError PERMISSION_DENIED', errCode(r) === 'PERMISSION_DENIED', r);
  const bob2 = await cluster.keygen('bob2.key');
  r = okOf(await call(client, 'principal_set_key', { principal_id: 'bob', public_key: bob2.pub }));
  check('principal_set_key bob', r?.results?.[0]?.kind === 'principal_changed', r);
  r = await call(asBob, 'principal_show', { principal_id: 'bob' });
  check('bob with his old key: isError UNAUTHENTICATED', errCode(r) === 'UNAUTHENTICATED', r);

  // ---- cluster status: the same object shape as `keyload cluster-status --json`
  r = okOf(await call(client, 'cluster_status', {}));
  check('cluster_status: 3 partitions, each with a leader and 3 members up', r?.partitions?.length === 3 &&
    r.partitions.every((p) => typeof p.leader === 'string' && p.members.length === 3 && p.members.every((x) => x.up)), r);
  const cs = await run(bin('keyload'), ['--cluster', cluster.keyed, '--json', 'cluster-status']);
  let csj = null;
  try { csj = JSON.parse(cs.stdout); } catch { /* checked below */ }
  const shape = (o) => JSON.stringify(o, (k, v) => (typeof v === 'number' ? 0 : v));
  check('cluster_status and keyload cluster-status --json: same keys, nodes and leaders',
    csj !== null && shape(csj.partitions.map((p) => ({ ...p, members: p.members.map((m) => ({ ...m, role: null })) }))) ===
      shape(r.partitions.map((p) => ({ ...p, members: p.members.map((m) => ({ ...m, role: null })) }))) &&
      csj.partitions.every((p, i) => p.leader === r.partitions[i].leader), { cli: csj, mcp: r });

  // ---- JSON-RPC errors: unknown tool, bad arguments
  check('unknown tool: McpError InvalidParams (-32602)', await rpcError(client, 'no_such_tool', {}) === ErrorCode.InvalidParams);
  check('missing required argument: -32602', await rpcError(client, 'enqueue', { queue: 'src' }) === ErrorCode.InvalidParams);
  check('wrong type: -32602', await rpcError(client, 'receive', { queue: 'src', max: 'ten' }) === ErrorCode.InvalidParams);
  check('out of range: -32602', await rpcError(client, 'receive', { queue: 'src', max: 0 }) === ErrorCode.InvalidParams);
  check('unknown property: -32602', await rpcError(client, 'queue_stats', { queue: 'src', bogus: 1 }) === ErrorCode.InvalidParams);
  check('not an enum value: -32602', await rpcError(client, 'principal_grant', { principal_id: 'bob', permission: 'Everything', queue_pattern: '*' }) === ErrorCode.InvalidParams);
  check('a token that is not base64: -32602', await rpcError(client, 'transfer_accept', { dest_queue: 'dst', intent_token: 'not base64!' }) === ErrorCode.InvalidParams);
  await client.ping();
  check('still serving after the errors', true);
  check('no token in the server log', !logs.join('').includes(created.intent_token) && !logs.join('').includes(receiptToken));
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
