// End to end: a version-1 Tower's whole conversation with `shellper legacy-main`, on Node's test runner.
// Usage: node --test clients/legacy-v1/e2e.mjs, with SHELLPER_CMD (a JSON argv, e.g. ["shellper"]) and
// LEGACY_DIR (a private directory for the sockets) in the environment.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { FrameType, ShellperClient, encodeFrame, isDeliberateExit, launchShellper } from './shellper-v1.mjs';

const shellper = JSON.parse(process.env.SHELLPER_CMD ?? '["shellper"]');
const dir = process.env.LEGACY_DIR ?? fs.mkdtempSync('/tmp/lgv1-');
const command = [...shellper, 'legacy-main'];

function until(emitter, event, predicate = () => true, timeoutMs = 10000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { emitter.off(event, on); reject(new Error(`timed out waiting for ${event}`)); }, timeoutMs);
    const on = (value) => { if (predicate(value)) { clearTimeout(timer); emitter.off(event, on); resolve(value); } };
    emitter.on(event, on);
  });
}

function output(client) {
  const seen = { text: '' };
  client.on('data', (d) => { seen.text += d.toString('utf8'); });
  seen.waitFor = (needle, timeoutMs = 10000) => seen.text.includes(needle) ? Promise.resolve(seen.text)
    : until(client, 'data', () => seen.text.includes(needle), timeoutMs).then(() => seen.text);
  return seen;
}

function alive(pid) {
  try { process.kill(pid, 0); return true; } catch { return false; }
}

async function gone(pid, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  while (alive(pid)) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 20));
  }
  return true;
}

test('a version-1 Tower drives legacy-main: launch, handshake, data, resize, signal, spawn, exit', async (t) => {
  const socketPath = path.join(dir, 'shellper-0b9e7a3c-1d2e-4f50-9a6b-7c8d9e0f1a2b.sock');
  const env = { PATH: process.env.PATH, HOME: '/tmp', GREETING: 'hello-from-env' };
  const shell = await launchShellper(command, {
    command: '/bin/sh', args: ['-c', 'echo "$GREETING"; exec /bin/sh'], cwd: '/tmp', env, cols: 90, rows: 20, socketPath,
  });
  t.after(async () => { if (alive(shell.pid)) process.kill(shell.pid, 'SIGTERM'); await gone(shell.pid); });
  assert.equal(fs.statSync(socketPath).mode & 0o777, 0o600);
  assert.equal(fs.statSync(dir).mode & 0o777, 0o700);
  assert.match(fs.readFileSync(`/proc/${shell.pid}/cmdline`, 'utf8'), /shellper-main\.js/);

  // HELLO -> WELCOME -> REPLAY
  const tower = new ShellperClient(socketPath, 'tower');
  const welcome = await tower.connect();
  assert.equal(welcome.version, 1);
  assert.equal(welcome.startTime, shell.startTime);
  assert.deepEqual([welcome.cols, welcome.rows], [90, 20]);
  assert.equal(welcome.alwaysSendsReplay, true);
  assert.ok(welcome.pid > 0 && welcome.pid !== shell.pid, 'WELCOME.pid is the child');
  await tower.waitForReplay();
  const out = output(tower);

  // the replay (or, if it came before the child wrote, the live output) has the child's first words
  if (!tower.replay.toString().includes('hello-from-env')) await out.waitFor('hello-from-env');

  // data both ways
  assert.equal(tower.write('echo typed-$((6*7))\n'), true);
  await out.waitFor('typed-42');

  // a terminal client at the same time, and its restricted rights
  const terminal = new ShellperClient(socketPath, 'terminal');
  await terminal.connect();
  const replay = await terminal.waitForReplay();
  assert.match(replay.toString(), /typed-42/);
  const termOut = output(terminal);
  terminal.signal(9); // ignored: only a tower may signal
  terminal.write('echo from-terminal\n');
  await out.waitFor('from-terminal');
  await termOut.waitFor('from-terminal');

  // resize
  tower.resize(100, 30);
  tower.write('stty size\n');
  await out.waitFor('30 100');

  // ping
  tower.ping();
  await until(tower, 'pong');

  // a signal outside the allowed set changes nothing; SIGINT reaches the shell, which lives on
  tower.signal(10);
  tower.write('echo still-here\n');
  await out.waitFor('still-here');

  // spawn: the child is replaced, the replay cleared, no EXIT for the old child
  let exits = 0;
  tower.on('exit', () => { exits += 1; });
  tower.spawn('/bin/sh', ['-c', 'echo spawned-child; read line; exit 4'], '/', env);
  await out.waitFor('spawned-child');
  assert.equal(exits, 0);
  const late = new ShellperClient(socketPath, 'terminal');
  await late.connect();
  const lateReplay = (await late.waitForReplay()).toString();
  assert.match(lateReplay, /spawned-child/);
  assert.doesNotMatch(lateReplay, /typed-42/);
  late.disconnect();

  // exit: code 4, broadcast to both clients, classified as the original did
  const towerExit = until(tower, 'exit');
  const terminalExit = until(terminal, 'exit');
  tower.write('go\n');
  assert.deepEqual(await towerExit, { code: 4, signal: '0' });
  assert.deepEqual(await terminalExit, { code: 4, signal: '0' });
  assert.equal(isDeliberateExit(await towerExit), false);

  // a late connection gets WELCOME, REPLAY, then the retained EXIT; the shellper stays (a husk)
  const afterExit = new ShellperClient(socketPath, 'tower');
  const lateExit = until(afterExit, 'exit');
  const w2 = await afterExit.connect();
  assert.ok(w2.pid > 0 && !alive(w2.pid), 'the dead child\'s pid, as node-pty kept it');
  assert.deepEqual(await lateExit, { code: 4, signal: '0' });
  assert.ok(alive(shell.pid));

  // SPAWN again, then a signal death: code 0, signal "9" (as node-pty reported it), not deliberate
  afterExit.spawn('/bin/sleep', ['60'], '/', env);
  const welcomeAgain = new ShellperClient(socketPath, 'terminal');
  let w3;
  for (let i = 0; i < 200; i += 1) {
    w3 = await welcomeAgain.connect();
    if (w3.pid > 0 && w3.pid !== w2.pid) break;
    welcomeAgain.disconnect();
    welcomeAgain.socket = null;
    welcomeAgain.welcome = null;
    welcomeAgain.replay = null;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(w3.pid > 0 && w3.pid !== w2.pid && alive(w3.pid), 'the SPAWNed child runs');
  const killed = until(afterExit, 'exit');
  afterExit.signal(9);
  const killExit = await killed;
  assert.deepEqual(killExit, { code: 0, signal: '9' });
  assert.equal(isDeliberateExit(killExit), false);

  // the new tower connection replaced the first one
  assert.equal(tower.connected, false);
  for (const c of [terminal, afterExit, welcomeAgain]) c.disconnect();

  // SIGTERM: exit 0, socket removed
  process.kill(shell.pid, 'SIGTERM');
  assert.ok(await gone(shell.pid), 'the shellper exits on SIGTERM');
  assert.equal(fs.existsSync(socketPath), false);
});

test('frames before HELLO are ignored and a raw frame round-trips', async (t) => {
  const socketPath = path.join(dir, 'shellper-raw.sock');
  const shell = await launchShellper(command, {
    command: '/bin/cat', args: [], cwd: '/', env: { PATH: process.env.PATH }, cols: 80, rows: 24, socketPath,
  });
  t.after(async () => { if (alive(shell.pid)) process.kill(shell.pid, 'SIGTERM'); await gone(shell.pid); });
  const net = await import('node:net');
  const sock = net.createConnection(socketPath);
  await until(sock, 'connect');
  sock.write(encodeFrame(FrameType.SIGNAL, JSON.stringify({ signal: 9 }))); // before HELLO: ignored
  sock.write(encodeFrame(FrameType.DATA, 'pre-hello\n'));
  sock.write(encodeFrame(FrameType.HELLO, JSON.stringify({ version: 1, clientType: 'tower' })));
  sock.write(encodeFrame(FrameType.DATA, 'post-hello\n'));
  let got = Buffer.alloc(0);
  await until(sock, 'data', (d) => { got = Buffer.concat([got, d]); return got.includes('post-hello\r\n'); });
  assert.equal(got.includes('pre-hello'), false);
  assert.equal(got[0], FrameType.WELCOME);
  sock.destroy();
});

// The original's client catalogue (shellper-client.test.ts) where it meets the real legacy mode.
test('client lifecycle against legacy-main: refused, already connected, replay, close, disconnect', async (t) => {
  const socketPath = path.join(dir, 'shellper-client.sock');
  const refused = new ShellperClient(socketPath, 'tower');
  await assert.rejects(refused.connect(), /ENOENT|ECONNREFUSED/);

  const shell = await launchShellper(command, {
    command: '/bin/cat', args: [], cwd: '/', env: { PATH: process.env.PATH }, cols: 80, rows: 24, socketPath,
  });
  t.after(async () => { if (alive(shell.pid)) process.kill(shell.pid, 'SIGTERM'); await gone(shell.pid); });

  const client = new ShellperClient(socketPath, 'tower');
  let warned = false;
  client.on('version-warning', () => { warned = true; });
  const welcome = await client.connect();
  assert.equal(welcome.version, 1);
  assert.equal(warned, false, 'equal versions: no warning');
  await assert.rejects(client.connect(), /Already connected/);
  assert.deepEqual(await client.waitForReplay(), Buffer.alloc(0)); // empty, and at once
  assert.equal(client.replay.length, 0);

  // sending: every frame type a Tower sends is accepted and answered as the original did
  const out = output(client);
  assert.equal(client.write('abc\n'), true);
  await out.waitFor('abc');
  assert.equal(client.resize(81, 25), true);
  client.ping();
  await until(client, 'pong');

  // an intentional disconnect emits no close, and writes are refused afterwards
  const second = new ShellperClient(socketPath, 'terminal');
  await second.connect();
  let secondClosed = false;
  second.on('close', () => { secondClosed = true; });
  second.disconnect();
  assert.equal(second.write('x'), false);

  // the server going away (SIGTERM) emits close exactly once on a live connection
  let closes = 0;
  client.on('close', () => { closes += 1; });
  const closed = until(client, 'close');
  process.kill(shell.pid, 'SIGTERM');
  await closed;
  assert.equal(closes, 1);
  assert.equal(client.connected, false);
  assert.equal(client.write('late'), false);
  assert.equal(secondClosed, false);
});
