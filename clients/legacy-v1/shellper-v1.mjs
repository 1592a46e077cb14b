// A protocol-version-1 shellper client in plain JavaScript (Node 20, no packages), written from the
// description of the TypeScript original (its shellper-protocol, shellper-client and the launch in
// SessionManager.createSession), not from its code. It is what a Tower written for the original does,
// and what tests/test_legacy_node.py drives against `shellper legacy-main`.

import { spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import net from 'node:net';
import fs from 'node:fs';
import path from 'node:path';

export const PROTOCOL_VERSION = 1;
export const HEADER_SIZE = 5;
export const MAX_FRAME_SIZE = 16 * 1024 * 1024;
export const FrameType = Object.freeze({
  DATA: 0x01, RESIZE: 0x02, SIGNAL: 0x03, EXIT: 0x04, REPLAY: 0x05, PING: 0x06, PONG: 0x07,
  HELLO: 0x08, WELCOME: 0x09, SPAWN: 0x0a,
});
export const ALLOWED_SIGNALS = new Set([1, 2, 9, 15, 28]);

export function encodeFrame(type, payload = Buffer.alloc(0)) {
  const body = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
  const header = Buffer.alloc(HEADER_SIZE);
  header.writeUInt8(type, 0);
  header.writeUInt32BE(body.length, 1);
  return Buffer.concat([header, body]);
}

export const encodeJson = (type, value) => encodeFrame(type, JSON.stringify(value));

export function parseJsonPayload(payload) {
  if (payload.length === 0) throw new Error('Empty JSON payload');
  return JSON.parse(payload.toString('utf8'));
}

// Exit classification as the original's isDeliberateExit: code 0 and no signal.
export const isDeliberateExit = (exit) =>
  exit.code === 0 && (exit.signal === null || exit.signal === undefined || exit.signal === '' || exit.signal === '0');

// The streaming parser: any fragmentation; oversized frames are skipped (frame-skipped), unknown types
// passed on; end() throws if the stream stopped inside a frame.
export class FrameParser extends EventEmitter {
  constructor() {
    super();
    this.buf = Buffer.alloc(0);
    this.skip = 0;
  }

  push(chunk) {
    if (this.skip > 0) {
      const drop = Math.min(this.skip, chunk.length);
      this.skip -= drop;
      chunk = chunk.subarray(drop);
    }
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    while (this.buf.length >= HEADER_SIZE) {
      const type = this.buf.readUInt8(0);
      const size = this.buf.readUInt32BE(1);
      if (size > MAX_FRAME_SIZE) {
        const have = Math.min(size, this.buf.length - HEADER_SIZE);
        this.skip = size - have;
        this.buf = this.buf.subarray(HEADER_SIZE + have);
        this.emit('frame-skipped', { type, size });
        continue;
      }
      if (this.buf.length < HEADER_SIZE + size) break;
      const payload = Buffer.from(this.buf.subarray(HEADER_SIZE, HEADER_SIZE + size));
      this.buf = this.buf.subarray(HEADER_SIZE + size);
      this.emit('frame', { type, payload });
    }
  }

  end() {
    const remaining = this.buf.length + this.skip;
    if (remaining) throw new Error(`Incomplete frame: ${remaining} bytes remaining at end of stream`);
  }
}

// One connection to a shellper. Events: data (Buffer), exit ({code, signal}), replay (Buffer), pong,
// close (unexpected end of a live connection), error, version-warning.
export class ShellperClient extends EventEmitter {
  constructor(socketPath, clientType = 'tower') {
    super();
    this.socketPath = socketPath;
    this.clientType = clientType;
    this.socket = null;
    this.connected = false;
    this.welcome = null;
    this.replay = null;
    this.exitInfo = null;
  }

  connect() {
    if (this.connected || this.socket) return Promise.reject(new Error('Already connected'));
    return new Promise((resolve, reject) => {
      const parser = new FrameParser();
      const early = [];
      let settled = false;
      const fail = (err) => { if (!settled) { settled = true; reject(err); } };
      const socket = net.createConnection(this.socketPath);
      this.socket = socket;
      parser.on('frame', (frame) => {
        if (!this.welcome) {
          if (frame.type !== FrameType.WELCOME) { early.push(frame); return; }
          let welcome;
          try { welcome = parseJsonPayload(frame.payload); } catch { fail(new Error('Invalid WELCOME payload')); socket.destroy(); return; }
          const version = typeof welcome.version === 'number' ? welcome.version : 0;
          if (version < PROTOCOL_VERSION) {
            fail(new Error(`Shellper protocol version ${version} is older than Tower version ${PROTOCOL_VERSION}`));
            socket.destroy();
            return;
          }
          if (version > PROTOCOL_VERSION) this.emit('version-warning', version);
          this.welcome = welcome;
          this.connected = true;
          settled = true;
          resolve(welcome);
          for (const f of early.splice(0)) this.dispatch(f);
          return;
        }
        this.dispatch(frame);
      });
      parser.on('frame-skipped', (info) => {
        this.emit('frame-skipped', info);
        if (info.type === FrameType.REPLAY && this.replay === null) this.gotReplay(Buffer.alloc(0));
      });
      socket.on('connect', () => socket.write(encodeJson(FrameType.HELLO, { version: PROTOCOL_VERSION, clientType: this.clientType })));
      socket.on('data', (chunk) => parser.push(chunk));
      socket.on('error', (err) => { fail(err); if (this.listenerCount('error')) this.emit('error', err); });
      socket.on('close', () => {
        const wasConnected = this.connected;
        this.connected = false;
        fail(new Error('Connection closed during handshake'));
        if (wasConnected && !this.intentional) this.emit('close');
      });
    });
  }

  dispatch({ type, payload }) {
    switch (type) {
      case FrameType.DATA: this.emit('data', payload); break;
      case FrameType.REPLAY: this.gotReplay(payload); break;
      case FrameType.EXIT:
        try { this.exitInfo = parseJsonPayload(payload); } catch { this.emit('error', new Error('Invalid EXIT payload')); return; }
        this.emit('exit', this.exitInfo);
        break;
      case FrameType.PING: this.send(FrameType.PONG); break;
      case FrameType.PONG: this.emit('pong'); break;
      default: break; // unknown types are ignored (forward compatibility)
    }
  }

  gotReplay(payload) {
    this.replay = payload;
    this.emit('replay', payload);
  }

  // The REPLAY, waiting up to timeoutMs (50 ms for a peer that does not advertise alwaysSendsReplay).
  waitForReplay(timeoutMs = 500) {
    if (this.replay !== null) return Promise.resolve(this.replay);
    const wait = this.welcome && this.welcome.alwaysSendsReplay === true ? timeoutMs : Math.min(timeoutMs, 50);
    return new Promise((resolve) => {
      const timer = setTimeout(() => { this.off('replay', onReplay); resolve(Buffer.alloc(0)); }, wait);
      const onReplay = (data) => { clearTimeout(timer); resolve(data); };
      this.once('replay', onReplay);
    });
  }

  send(type, payload) {
    if (!this.connected || !this.socket) return false;
    this.socket.write(payload === undefined ? encodeFrame(type) : Buffer.isBuffer(payload) || typeof payload === 'string' ? encodeFrame(type, payload) : encodeJson(type, payload));
    return true;
  }

  write(data) { return this.send(FrameType.DATA, Buffer.from(data)); }
  resize(cols, rows) { return this.send(FrameType.RESIZE, { cols, rows }); }
  signal(signal) { return this.send(FrameType.SIGNAL, { signal }); }
  spawn(command, args, cwd, env) { return this.send(FrameType.SPAWN, { command, args, cwd, env }); }
  ping() { return this.send(FrameType.PING); }

  disconnect() {
    this.intentional = true;
    this.connected = false;
    if (this.socket) this.socket.destroy();
    this.socket = null;
  }
}

// The launch as the original's SessionManager.createSession does it, with `command` (argv) in place of
// `node shellper-main.js`: detached, stdin ignored, stdout a pipe read to EOF for {pid, startTime},
// stderr appended to <socket>.log, then wait for the socket to exist.
export async function launchShellper(command, config, { timeoutMs = 10000 } = {}) {
  fs.mkdirSync(path.dirname(config.socketPath), { recursive: true, mode: 0o700 });
  const logPath = config.socketPath.replace(/\.sock$/, '.log');
  const logFd = fs.openSync(logPath, 'a');
  const child = spawn(command[0], [...command.slice(1), JSON.stringify(config)], {
    detached: true, stdio: ['ignore', 'pipe', logFd],
  });
  fs.closeSync(logFd);
  const out = await new Promise((resolve, reject) => {
    const chunks = [];
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error('launch timed out')); }, timeoutMs);
    child.stdout.on('data', (c) => chunks.push(c));
    child.stdout.on('end', () => { clearTimeout(timer); resolve(Buffer.concat(chunks).toString()); });
    child.on('error', (err) => { clearTimeout(timer); reject(err); });
  });
  const info = JSON.parse(out);
  if (typeof info.pid !== 'number' || typeof info.startTime !== 'number') throw new Error(`bad launch line ${out}`);
  child.unref();
  const deadline = Date.now() + 5000;
  while (!fs.existsSync(config.socketPath)) {
    if (Date.now() > deadline) throw new Error('socket did not appear');
    await new Promise((r) => setTimeout(r, 50));
  }
  return { ...info, logPath, child };
}
