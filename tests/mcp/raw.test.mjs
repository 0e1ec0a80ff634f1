// The raw stdio protocol of bin/keyload-mcp, byte for byte, without an SDK and without a
// cluster: every stdout line is one JSON-RPC object; malformed JSON is -32700 and the server
// keeps serving; a line over 4 MiB is refused and skipped; batches, bad ids and a missing
// jsonrpc are -32600; unknown methods -32601; notifications get no answer; initialize
// negotiates the protocol version; end of input ends the server with status 0.
import { spawn } from 'node:child_process';
import { bin, check, root, summary } from './lib.mjs';

const MAX_LINE = 4 << 20;

// Sends the lines, closes stdin, and collects stdout, stderr and the exit status (bounded).
function session(lines, env = {}) {
  return new Promise((resolve) => {
    const p = spawn(bin('keyload-mcp'), [], { cwd: root, env: { PATH: process.env.PATH, KEYLOAD_TIMEOUT_MS: '300', ...env } });
    const out = [], err = [];
    p.stdout.on('data', (d) => out.push(d));
    p.stderr.on('data', (d) => err.push(d));
    const kill = setTimeout(() => p.kill('SIGKILL'), 30000);
    p.on('close', (code, signal) => {
      clearTimeout(kill);
      resolve({ code, signal, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') });
    });
    p.stdin.on('error', () => {});
    p.stdin.end(lines.join('\n') + '\n');
  });
}

const req = (id, method, params) => JSON.stringify({ jsonrpc: '2.0', id, method, ...(params ? { params } : {}) });

const lines = [
  req(1, 'initialize', { protocolVersion: '2024-11-05', capabilities: {}, clientInfo: { name: 'raw', version: '1' } }),
  JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }),
  '{"jsonrpc":"2.0","id":2,"method":"ping"',          // malformed: -32700, id null
  req(3, 'ping'),                                      // still serving
  '[' + req(4, 'ping') + ']',                          // a batch: -32600
  JSON.stringify({ jsonrpc: '1.0', id: 5, method: 'ping' }),
  JSON.stringify({ jsonrpc: '2.0', id: { x: 1 }, method: 'ping' }),
  req(6, 'resources/list'),                            // not offered: -32601
  JSON.stringify({ jsonrpc: '2.0', method: 'notifications/unknown' }), // no answer
  JSON.stringify({ jsonrpc: '2.0', id: 99, result: {} }),             // a client answer: ignored
  req(7, 'initialize', { protocolVersion: '1999-01-01' }),            // unknown: the newest
  req(8, 'initialize', {}),                                           // -32602
  'x'.repeat(MAX_LINE + 10),                                          // too long: refused, skipped
  req(9, 'tools/call', { name: 'queue_stats', arguments: { queue: 'q' } }), // no cluster: isError
  req(10, 'tools/call', { name: 'queue_stats', arguments: { queue: 'q', extra: true } }),
  '',                                                                 // empty line: ignored
  req(11, 'tools/list'),
  '\u00ff\u00fe not json',
  req(12, 'ping'),
];

const s = await session(lines, { KEYLOAD_CLUSTER: '/nonexistent/cluster.json' });
check('exits 0 at end of input', s.code === 0, { code: s.code, signal: s.signal, stderr: s.stderr.slice(-500) });
const outLines = s.stdout.split('\n');
check('stdout ends with a newline', outLines.at(-1) === '');
const msgs = [];
let allJson = true;
for (const l of outLines.slice(0, -1)) {
  try {
    const m = JSON.parse(l);
    if (m.jsonrpc !== '2.0' || typeof m !== 'object') allJson = false;
    msgs.push(m);
  } catch { allJson = false; }
}
check('stdout holds only JSON-RPC 2.0 objects, one per line', allJson, s.stdout.slice(0, 500));
const byId = new Map(msgs.filter((m) => m.id !== null).map((m) => [JSON.stringify(m.id), m]));
const nullIds = msgs.filter((m) => m.id === null);
check('one answer per request, none for notifications or client answers', msgs.length === 15,
  msgs.map((m) => m.id));
check('initialize 2024-11-05: that version, tools capability, serverInfo',
  byId.get('1')?.result?.protocolVersion === '2024-11-05' && byId.get('1').result.capabilities?.tools !== undefined &&
  byId.get('1').result.serverInfo?.name === 'keyload-mcp', byId.get('1'));
check('malformed JSON: -32700 with id null', nullIds[0]?.error?.code === -32700, nullIds[0]);
check('served after the malformed line', byId.get('3')?.result !== undefined && byId.get('12')?.result !== undefined);
check('a batch: -32600', nullIds[1]?.error?.code === -32600, nullIds[1]);
check('jsonrpc 1.0: -32600 with its id', byId.get('5')?.error?.code === -32600, byId.get('5'));
check('an object id: -32600', nullIds[2]?.error?.code === -32600, nullIds[2]);
check('an unknown method: -32601', byId.get('6')?.error?.code === -32601, byId.get('6'));
check('an unknown protocol version: the newest, 2025-11-25', byId.get('7')?.result?.protocolVersion === '2025-11-25', byId.get('7'));
check('initialize without protocolVersion: -32602', byId.get('8')?.error?.code === -32602, byId.get('8'));
check('a line over 4 MiB: -32600, and the next line is served', nullIds[3]?.error?.code === -32600 &&
  /larger than/.test(nullIds[3].error.message) && byId.get('9') !== undefined, nullIds[3]);
const r9 = byId.get('9')?.result;
check('a tool failure is a result with isError and {"error":{code,message,detail}}', r9?.isError === true &&
  typeof r9.structuredContent?.error?.code === 'string' && JSON.parse(r9.content[0].text).error.code === r9.structuredContent.error.code, r9);
check('an unknown argument: -32602 naming it', byId.get('10')?.error?.code === -32602 && /extra/.test(byId.get('10').error.message), byId.get('10'));
check('tools/list answered', Array.isArray(byId.get('11')?.result?.tools), byId.get('11'));
check('invalid UTF-8 / not JSON: -32700', nullIds[4]?.error?.code === -32700, nullIds[4]);
check('logs go to stderr', /keyload-mcp: serving on stdio/.test(s.stderr));

// Bad configuration is refused at start, on stderr, with nothing on stdout.
const bad = await session([req(1, 'ping')], { KEYLOAD_TIMEOUT_MS: 'soon' });
check('a malformed KEYLOAD_TIMEOUT_MS: exit 2, stdout empty', bad.code === 2 && bad.stdout === '' &&
  /KEYLOAD_TIMEOUT_MS/.test(bad.stderr), bad);
// Only one of KEYLOAD_PRINCIPAL and KEYLOAD_KEY: every tool call is refused, the server serves.
const half = await session([req(1, 'tools/call', { name: 'queue_stats', arguments: { queue: 'q' } }), req(2, 'ping')],
  { KEYLOAD_PRINCIPAL: 'root' });
const h = half.stdout.trim().split('\n').map((l) => JSON.parse(l));
check('KEYLOAD_PRINCIPAL without KEYLOAD_KEY: isError INVALID_ARGUMENT naming both, then ping',
  h[0]?.result?.isError === true && /KEYLOAD_KEY/.test(h[0].result.structuredContent.error.message) && h[1]?.result !== undefined, h);

process.exit(summary() ? 0 : 1);
