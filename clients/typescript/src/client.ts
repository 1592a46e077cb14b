// One connection to a shellper (PROTOCOL.md section 7): connect with a role, HELLO, WELCOME, REPLAY,
// then frames as they come, with the output position and the last event tracked as they are handed
// out (section 8.2), so that `nextOffset` is always what a reconnection resumes from.

import { lstatSync, readFileSync } from "node:fs";
import net from "node:net";
import { dirname, resolve } from "node:path";

import { ProtocolError, FrameDecoder, encodeData, encodeFrame, typeName } from "./codec.js";
import {
  FrameType, MAX_FRAME_SIZE, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, REPLY_VERSION, ROLES, SIGNALS,
  type ErrorFrame, type Exit, type Frame, type FrameInit, type Replay, type Reply, type Role, type ScreenReply, type StatusReply,
  type Welcome,
} from "./frames.js";

export const CLIENT_NAME = "@shellper/client/0.1.0";
const HANDSHAKE_TIMEOUT_MS = 10_000;
const REQUEST_TIMEOUT_MS = 10_000;
/** Frames held for the caller before the socket is paused: a tower that reads slowly is waited for
 * by the shellper (section 9) instead of its frames piling up here. */
const MAX_BUFFERED = 4 * 1024 * 1024;
const CLOSE_TIMEOUT_MS = 1000;

export class ClientError extends Error {
  constructor(readonly path: string, message: string) {
    super(`${path}: ${message}`);
    this.name = new.target.name;
  }
}
/** A socket refused before anything was sent to it: its directory is not ours alone (protocol/RUNTIME.md,
 * "The runtime directory"), so another user could have planted it. `owner` is the uid lstat found. */
export class UntrustedSocket extends ClientError {
  constructor(path: string, readonly owner: number | null, readonly reason: string) {
    super(path, `not trusted: ${reason}; another user could have put it there, so nothing was sent to it ` +
      "(use a directory of your own)");
  }
}
/** Something other than a socket is at the path (a symlink is never connected through). */
export class NotASocket extends ClientError {}
/** No socket at that path. */
export class SessionNotFound extends ClientError {}
/** A socket nobody accepts on (a shellper that died without removing it). */
export class ConnectionRefused extends ClientError {}
export class Timeout extends ClientError {}
/** The connection ended (the shellper closed it, went away, or this client closed it). */
export class SessionGone extends ClientError {}
/** The shellper answered with an ERROR: `error` is the frame (fatal ones end the connection). */
export class RemoteError extends ClientError {
  constructor(path: string, readonly error: ErrorFrame) {
    super(path, `${error.code}: ${error.message}`);
  }
}
/** Version 3: a request with an id was not carried out; `reply` is its REPLY (`code`, `message`). */
export class RequestFailed extends ClientError {
  constructor(path: string, readonly reply: Reply) {
    super(path, `${typeName(reply.frame_type)} not carried out: ${reply.code}${reply.message ? `: ${reply.message}` : ""}`);
  }
}
/** A request that gets a REPLY on a version-3 connection. */
export type RequestInit = FrameInit<"RESIZE"> | FrameInit<"SIGNAL"> | FrameInit<"SPAWN"> | FrameInit<"STOP">;
/** The shellper behind the socket is no longer running (its pid, start time and boot checked): the
 * session will not answer again. */
export class ShellperDead extends ClientError {}
/** The peer broke the protocol (a malformed frame, a WELCOME missing, a stream that does not add up). */
export class ProtocolViolation extends ClientError {}
/** WELCOME names another shellper instance than the one expected (a new session under the name). */
export class InstanceMismatch extends ClientError {}

export interface ConnectOptions {
  role?: Role;
  /** The offset up to which this client has the output: replay continues exactly there. */
  resumeFrom?: bigint | number | null;
  /** Without resumeFrom: about the last this-many bytes of history (0: live output only). */
  replayBytes?: bigint | number | null;
  /** Held events with a greater seq, then live ones (terminals and viewers get events only so). */
  eventsAfter?: bigint | number | null;
  clientName?: string;
  /** The protocol version to offer (default: the highest this package speaks). */
  version?: number;
  /** Refuse a shellper whose WELCOME.instance_id differs (from the session record). */
  expectInstanceId?: string | null;
  handshakeTimeoutMs?: number;
  maxFrame?: number;
  /** Version 3, a terminal or viewer without resumeFrom: replay the rendered screen (REPLAY.preamble
   * draws it; REPLAY.offset is where live output continues), after up to this many scrollback lines. */
  rendered?: number | null;
  /** Version 3, a terminal: its size, which the session takes before the replay (so a rendered replay is
   * drawn for it), as if a RESIZE came first. */
  size?: { cols: number; rows: number } | null;
  /** Bytes of frames held for the caller before this client stops reading the socket (default 4 MiB). */
  maxBuffered?: number;
}

export interface SpawnOptions {
  argv?: string[] | null;
  cwd?: string | null;
  env?: Record<string, string> | null;
  clearRing?: boolean;
}

type Waiter<T> = { resolve: (value: T) => void; reject: (error: Error) => void };

/** A connected client. `Client.connect(path, options)` returns once WELCOME and REPLAY are in. */
export class Client implements AsyncIterable<Frame> {
  welcome!: Welcome;
  replay!: Replay;
  /** The version this connection speaks (WELCOME.version). */
  version = PROTOCOL_VERSION;
  /** The offset of the next output byte: REPLAY.offset + its data, then each DATA and GAP handed out. */
  nextOffset = 0n;
  /** Output bytes lost so far on this connection (REPLAY.gap and GAP.missed). */
  missed = 0n;
  /** The seq of the last event handed out (held events resume after it). */
  lastEventSeq: bigint | null = null;
  /** The last EXIT handed out. */
  exit: Exit | null = null;
  /** The session's state as WELCOME, the last EXIT or the last `state` event handed out said. */
  sessionState = "";
  /** Why the connection ended, once it has. */
  closedError: ClientError | null = null;

  private readonly decoder: FrameDecoder;
  private readonly queue: Frame[] = [];
  private buffered = 0;
  private waiter: (() => void) | null = null;
  private ended = false;
  private statusWaiters: Waiter<StatusReply>[] = [];
  private pingWaiters = new Map<bigint, Waiter<void>>();
  private nonce = 0n;
  /** Version 3: requests sent with an id, by id, until their REPLY (or STATUS_REPLY) comes. */
  private idWaiters = new Map<bigint, Waiter<Reply | StatusReply | ScreenReply>>();
  private lastId = 0n;
  private readonly closedPromise: Promise<void>;

  private constructor(
    readonly path: string,
    readonly role: Role,
    private readonly socket: net.Socket,
    maxFrame: number,
    private readonly maxBuffered: number,
  ) {
    this.decoder = new FrameDecoder(maxFrame);
    this.closedPromise = new Promise((resolve) => socket.once("close", () => resolve()));
    socket.on("data", (chunk: Buffer) => this.received(chunk));
    socket.on("end", () => this.finish(null));
    socket.on("error", (error: NodeJS.ErrnoException) => this.finish(new SessionGone(path, `connection lost: ${error.code ?? error.message}`)));
    socket.on("close", () => this.finish(null));
  }

  static async connect(path: string, options: ConnectOptions = {}): Promise<Client> {
    const role = options.role ?? "tower";
    if (!(ROLES as readonly string[]).includes(role)) throw new TypeError(`role must be one of ${ROLES.join(", ")}`);
    if (options.size) checkSize(options.size.cols, options.size.rows);
    const socket = await open(path);
    const client = new Client(path, role, socket, options.maxFrame ?? MAX_FRAME_SIZE, options.maxBuffered ?? MAX_BUFFERED);
    try {
      await client.handshake(options);
    } catch (error) {
      client.abort();
      await client.closed;
      throw error;
    }
    return client;
  }

  private async handshake(options: ConnectOptions): Promise<void> {
    const big = (v: bigint | number | null | undefined): bigint | null => (v === null || v === undefined ? null : BigInt(v));
    this.send({
      type: "HELLO",
      version: options.version ?? PROTOCOL_VERSION,
      role: this.role,
      resume_from: big(options.resumeFrom),
      replay_bytes: big(options.replayBytes),
      events_after: big(options.eventsAfter),
      client: options.clientName ?? CLIENT_NAME,
      rendered: options.rendered ?? null,
      cols: options.size?.cols ?? null,
      rows: options.size?.rows ?? null,
    });
    const timeoutMs = options.handshakeTimeoutMs ?? HANDSHAKE_TIMEOUT_MS;
    const deadline = Date.now() + timeoutMs;
    const next = async (): Promise<Frame> => {
      const frame = await this.take(Math.max(0, deadline - Date.now()));
      if (frame === undefined) throw new Timeout(this.path, `no WELCOME/REPLAY within ${timeoutMs} ms`);
      if (frame.type === "ERROR") throw new RemoteError(this.path, frame);
      return frame;
    };
    const welcome = await next();
    if (welcome.type !== "WELCOME") throw new ProtocolViolation(this.path, `expected WELCOME, got ${welcome.type}`);
    const offered = options.version ?? PROTOCOL_VERSION;
    if (welcome.version > offered || welcome.version < MIN_PROTOCOL_VERSION) {
      throw new ProtocolViolation(this.path, `WELCOME speaks version ${welcome.version}; this client speaks ${MIN_PROTOCOL_VERSION}..${offered}`);
    }
    if (options.expectInstanceId != null && welcome.instance_id !== options.expectInstanceId) {
      throw new InstanceMismatch(this.path, `instance ${welcome.instance_id}, expected ${options.expectInstanceId}`);
    }
    const replay = await next();
    if (replay.type !== "REPLAY") throw new ProtocolViolation(this.path, `expected REPLAY, got ${replay.type}`);
    this.welcome = welcome;
    this.sessionState = welcome.state;
    this.version = welcome.version;
    this.replay = replay;
    this.nextOffset = replay.offset + BigInt(replay.data.length);
    this.missed = replay.gap;
    this.lastEventSeq = options.eventsAfter != null ? BigInt(options.eventsAfter) : welcome.event_seq;
  }

  // ------------------------------------------------------------------------------------- reading

  private received(chunk: Buffer): void {
    this.decoder.feed(chunk);
    try {
      for (const decoded of this.decoder.frames()) {
        if (decoded.kind === "frame") this.arrived(decoded.frame);
        else if (decoded.kind === "skipped" && decoded.frameType === FrameType.DATA) {
          // Output was lost and nextOffset no longer matches what follows: end here, so that a
          // reconnection with resumeFrom = nextOffset gets those bytes from the ring (section 2).
          this.finish(new SessionGone(this.path, `an oversized DATA frame (${decoded.length} bytes) was skipped: reconnect with resumeFrom`));
          this.socket.destroy();
          return;
        }
        // other oversized frames and unknown types are passed over, as section 2 says
      }
    } catch (error) {
      const why = error instanceof ProtocolError ? error.message : String(error);
      this.finish(new ProtocolViolation(this.path, why));
      this.socket.destroy();
      return;
    }
    if (this.buffered >= this.maxBuffered) this.socket.pause();
  }

  private arrived(frame: Frame): void {
    if (frame.type === "PING") {
      // shellpers do not send PING; a peer that does gets its PONG, as section 5 asks of clients
      if (!this.ended) this.socket.write(encodeFrame({ type: "PONG", nonce: frame.nonce }));
      return;
    }
    if ((frame.type === "REPLY" || frame.type === "STATUS_REPLY" || frame.type === "SCREEN_REPLY") && frame.id !== null
      && this.idWaiters.has(frame.id)) {
      const waiter = this.idWaiters.get(frame.id);
      this.idWaiters.delete(frame.id);
      waiter?.resolve(frame);
      return;
    }
    if (frame.type === "STATUS_REPLY" && frame.id === null && this.statusWaiters.length > 0) {
      this.statusWaiters.shift()?.resolve(frame);
      return;
    }
    if (frame.type === "PONG" && frame.nonce !== null && this.pingWaiters.has(frame.nonce)) {
      const waiter = this.pingWaiters.get(frame.nonce);
      this.pingWaiters.delete(frame.nonce);
      waiter?.resolve();
      return;
    }
    this.queue.push(frame);
    this.buffered += frame.type === "DATA" ? frame.data.length : 64;
    this.wake();
  }

  private finish(error: ClientError | null): void {
    if (this.ended) return;
    this.ended = true;
    let closing: ClientError = error ?? new SessionGone(this.path, "the shellper closed the connection");
    if (error === null) {
      try {
        this.decoder.close();
      } catch (e) {
        closing = new ProtocolViolation(this.path, (e as Error).message);
      }
    }
    this.closedError = closing;
    for (const w of this.statusWaiters) w.reject(closing);
    for (const w of this.pingWaiters.values()) w.reject(closing);
    for (const w of this.idWaiters.values()) w.reject(closing); // the end of the connection answers them (7.5)
    this.statusWaiters = [];
    this.pingWaiters.clear();
    this.idWaiters.clear();
    this.wake();
  }

  private wake(): void {
    const waiter = this.waiter;
    this.waiter = null;
    waiter?.();
  }

  /** The next queued frame, undefined on timeout; throws closedError at the end. */
  private async take(timeoutMs?: number): Promise<Frame | undefined> {
    while (this.queue.length === 0) {
      if (this.ended) throw this.closedError as ClientError;
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await new Promise<boolean>((resolve) => {
        this.waiter = () => resolve(false);
        if (timeoutMs !== undefined) timer = setTimeout(() => resolve(true), timeoutMs);
      });
      clearTimeout(timer);
      if (timedOut) {
        this.waiter = null;
        return undefined;
      }
    }
    const frame = this.queue.shift() as Frame;
    this.buffered -= frame.type === "DATA" ? frame.data.length : 64;
    if (this.buffered <= this.maxBuffered / 2 && this.socket.isPaused()) this.socket.resume();
    return frame;
  }

  /** The next frame, position tracked; null after `timeoutMs` with nothing. A fatal ERROR is thrown
   * as RemoteError; once the connection has ended and every frame is out, its closedError. */
  async recv(timeoutMs?: number): Promise<Frame | null> {
    const frame = await this.take(timeoutMs);
    if (frame === undefined) return null;
    this.deliver(frame);
    if (frame.type === "ERROR" && frame.fatal) {
      this.closedError = new RemoteError(this.path, frame);
      throw this.closedError;
    }
    return frame;
  }

  private deliver(frame: Frame): void {
    switch (frame.type) {
      case "DATA":
        this.nextOffset += BigInt(frame.data.length);
        break;
      case "GAP":
        if (frame.missed !== frame.offset - this.nextOffset) {
          throw new ProtocolViolation(this.path, `GAP to ${frame.offset} says ${frame.missed} missed, but this client is at ${this.nextOffset}`);
        }
        this.missed += frame.missed;
        this.nextOffset = frame.offset;
        break;
      case "EVENT":
        if (frame.seq > 0n) this.lastEventSeq = frame.seq;
        if (frame.kind === "state" && typeof frame.data.state === "string") this.sessionState = frame.data.state;
        break;
      case "EXIT":
        this.exit = frame;
        if (frame.state !== "") this.sessionState = frame.state;
        break;
      default:
        break;
    }
  }

  /** Frames until the connection ends (a normal close ends the loop; a fatal ERROR throws). */
  async *[Symbol.asyncIterator](): AsyncGenerator<Frame> {
    for (;;) {
      let frame: Frame | null;
      try {
        frame = await this.recv();
      } catch (error) {
        if (error instanceof SessionGone) return;
        throw error;
      }
      if (frame !== null) yield frame;
    }
  }

  // ------------------------------------------------------------------------------------- writing

  /** Sends one frame (checked by the codec first: a malformed frame throws and is not sent). */
  send(frame: FrameInit): void {
    const bytes = encodeFrame(frame);
    this.sendBytes(bytes);
  }

  private sendBytes(bytes: Uint8Array): void {
    if (this.ended || this.socket.destroyed) throw this.closedError ?? new SessionGone(this.path, "not connected");
    this.socket.write(bytes);
  }

  /** Input for the PTY (tower and terminal). A string is sent as UTF-8. */
  write(data: Uint8Array | string): void {
    this.sendBytes(encodeData(typeof data === "string" ? new TextEncoder().encode(data) : data));
  }

  resize(cols: number, rows: number): void {
    checkSize(cols, rows);
    this.send({ type: "RESIZE", cols, rows });
  }

  /** A signal for the child's process group, by name (tower only). */
  signal(name: string): void {
    const bare = name.toUpperCase().replace(/^SIG/, "");
    if (!(SIGNALS as readonly string[]).includes(bare)) throw new RangeError(`signal ${name} is not one of ${SIGNALS.join(" ")}`);
    this.send({ type: "SIGNAL", signal: bare });
  }

  /** Replace the child (tower only); left-out fields keep the session's current ones. */
  spawn(options: SpawnOptions = {}): void {
    if (options.argv != null && options.argv.length === 0) throw new RangeError("argv must not be empty");
    this.send({ type: "SPAWN", argv: options.argv ?? null, cwd: options.cwd ?? null, env: options.env ?? null, clear_ring: options.clearRing ?? false });
  }

  /** End the session (tower only): SIGTERM, `grace` seconds, SIGKILL; then the shellper exits. */
  stop(grace?: number | null): void {
    if (grace != null && !(Number.isFinite(grace) && grace >= 0)) throw new RangeError(`grace ${grace} must be a finite number >= 0`);
    this.send({ type: "STOP", grace: grace ?? null });
  }

  /** STATUS, answered by its STATUS_REPLY (which is then not queued); matched by id on version 3. */
  status(timeoutMs = REQUEST_TIMEOUT_MS): Promise<StatusReply> {
    if (this.version >= REPLY_VERSION) {
      const id = ++this.lastId;
      return this.await<Reply | StatusReply | ScreenReply>((w) => this.idWaiters.set(id, w), () => this.send({ type: "STATUS", id }), timeoutMs, () => {
        this.idWaiters.delete(id);
      }) as Promise<StatusReply>;
    }
    return this.await((w) => this.statusWaiters.push(w), () => this.send({ type: "STATUS" }), timeoutMs, (w) => {
      this.statusWaiters = this.statusWaiters.filter((x) => x !== w);
    });
  }

  /** Version 3: the screen of the moment as the shellper's model has it (`text`: plain rows; `ansi`:
   * rows with SGR sequences), with up to `scrollback` lines above it. Any role. */
  screen(options: { format?: "text" | "ansi"; scrollback?: number } = {}, timeoutMs = REQUEST_TIMEOUT_MS): Promise<ScreenReply> {
    if (this.version < REPLY_VERSION) {
      return Promise.reject(new ClientError(this.path, `this connection speaks version ${this.version}: SCREEN needs version 3`));
    }
    const id = ++this.lastId;
    const frame = { type: "SCREEN" as const, id, format: options.format ?? "text", scrollback: options.scrollback ?? 0 };
    return this.await<Reply | StatusReply | ScreenReply>((w) => this.idWaiters.set(id, w), () => this.send(frame), timeoutMs, () => {
      this.idWaiters.delete(id);
    }) as Promise<ScreenReply>;
  }

  /** Version 3: sends RESIZE, SIGNAL, SPAWN or STOP with an id and resolves with its REPLY once it is
   * carried out (SPAWN: the new child started; STOP: the tree ended), or rejects with RequestFailed
   * (`forbidden`, `bad_signal`, `spawn_failed`, ...: the connection stays). The connection's end
   * rejects what is still waiting. On a version-2 connection it throws: nothing would answer. */
  request(frame: RequestInit, timeoutMs?: number): Promise<Reply> {
    if (this.version < REPLY_VERSION) {
      return Promise.reject(new ClientError(this.path, `this connection speaks version ${this.version}: requests get no REPLY before version ${REPLY_VERSION}`));
    }
    const id = ++this.lastId;
    const answered = this.await<Reply | StatusReply | ScreenReply>((w) => this.idWaiters.set(id, w), () => this.send({ ...frame, id }), timeoutMs, () => {
      this.idWaiters.delete(id);
    });
    return answered.then((reply) => {
      if (reply.type !== "REPLY") throw new ProtocolViolation(this.path, `request ${id} answered by ${reply.type}`);
      if (!reply.ok) throw new RequestFailed(this.path, reply);
      return reply;
    });
  }

  /** PING and its PONG: a round trip, and a barrier after every frame sent before it. */
  ping(timeoutMs = REQUEST_TIMEOUT_MS): Promise<void> {
    const nonce = ++this.nonce;
    return this.await((w) => this.pingWaiters.set(nonce, w), () => this.send({ type: "PING", nonce }), timeoutMs, () => {
      this.pingWaiters.delete(nonce);
    });
  }

  private await<T>(register: (w: Waiter<T>) => void, send: () => void, timeoutMs: number | undefined, forget: (w: Waiter<T>) => void): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = timeoutMs === undefined ? undefined : setTimeout(() => {
        forget(waiter);
        reject(new Timeout(this.path, `no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      const waiter: Waiter<T> = {
        resolve: (v) => { clearTimeout(timer); resolve(v); },
        reject: (e) => { clearTimeout(timer); reject(e); },
      };
      register(waiter);
      try {
        send();
      } catch (error) {
        forget(waiter);
        waiter.reject(error as Error);
      }
    });
  }

  // ------------------------------------------------------------------------------------- closing

  /** Resolves once the socket is closed. */
  get closed(): Promise<void> {
    return this.closedPromise;
  }

  /** Detach: close this connection (the session carries on). */
  async close(): Promise<void> {
    this.finish(new SessionGone(this.path, "closed by this client"));
    this.socket.end();
    this.socket.resume();
    const timer = setTimeout(() => this.socket.destroy(), CLOSE_TIMEOUT_MS); // a peer that never closes its side
    await this.closedPromise;
    clearTimeout(timer);
  }

  /** Drop the connection at once. */
  abort(): void {
    this.finish(new SessionGone(this.path, "closed by this client"));
    this.socket.destroy();
  }

  /** The peer's pid from WELCOME. */
  get shellperPid(): number {
    return this.welcome.shellper_pid;
  }
}

/** Whether the shellper a WELCOME described still runs: same boot, its pid alive and not a zombie,
 * with the start time WELCOME gave (field 22 of /proc/PID/stat). True when this cannot be told. */
export function shellperAlive(welcome: Welcome): boolean {
  let bootId: string;
  try {
    bootId = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
  } catch {
    return true; // no /proc: nothing to go by
  }
  if (bootId !== welcome.boot_id) return false;
  let stat: string;
  try {
    stat = readFileSync(`/proc/${welcome.shellper_pid}/stat`, "utf8");
  } catch {
    return false;
  }
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" "); // from field 3 (state) on
  return fields[0] !== "Z" && Number(fields[19]) === welcome.shellper_start_time;
}

/** Why a runtime directory (lstat's `mode` and `uid`) cannot be trusted by `euid`, or null: the rule the
 * shellper applies to the directory it creates (shellper.core.trust.dir_refusal). */
export function dirRefusal(path: string, mode: number, uid: number, euid: number): string | null {
  const type = mode & 0o170000;
  if (type === 0o120000) return "is a symlink; remove it (shellper never follows a symlinked directory)";
  if (type !== 0o040000) return "exists but is not a directory";
  if (uid !== euid) return `is owned by uid ${uid}, not by us (uid ${euid})`;
  const perm = mode & 0o7777;
  if (perm & 0o077) return `is group/world accessible (mode ${perm.toString(8).padStart(4, "0")}); fix with chmod 700 ${path}`;
  return null;
}

/** Refuse a socket whose directory another user could have planted it in, and a path that is not a socket.
 * Node reads no SO_PEERCRED without native code, so the server's uid, which the Python clients check too
 * once connected, is not checked here: the directory is all that stands (README, "Limits"). */
export function checkSocketPath(path: string): void {
  const dir = dirname(resolve(path));
  const euid = process.geteuid?.();
  let st;
  try {
    st = lstatSync(dir);
  } catch {
    st = undefined; // nothing there: connect() says there is no session
  }
  if (st !== undefined && euid !== undefined) {
    const why = dirRefusal(dir, st.mode, st.uid, euid);
    if (why !== null) throw new UntrustedSocket(path, st.uid, `its directory ${dir} ${why}`);
  }
  let file;
  try {
    file = lstatSync(path);
  } catch {
    return;
  }
  if (file.isSymbolicLink()) throw new NotASocket(path, "is a symlink, not a session socket; shellper never connects through one");
  if (!file.isSocket()) throw new NotASocket(path, "is not a session socket");
}

function open(path: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    checkSocketPath(path); // a throw here rejects: nothing was connected
    const socket = net.createConnection({ path });
    const fail = (error: NodeJS.ErrnoException): void => {
      socket.destroy();
      if (error.code === "ENOENT") reject(new SessionNotFound(path, "no such socket"));
      else if (error.code === "ECONNREFUSED") reject(new ConnectionRefused(path, "connection refused (no shellper behind the socket)"));
      else reject(new ClientError(path, `cannot connect: ${error.code ?? error.message}`));
    };
    socket.once("error", fail);
    socket.once("connect", () => {
      socket.off("error", fail);
      resolve(socket);
    });
  });
}

export { typeName };

/** The terminal size range the shellper holds RESIZE and HELLO's size to (outside it, it closes the connection). */
function checkSize(cols: number, rows: number): void {
  for (const [name, v] of [["cols", cols], ["rows", rows]] as const) {
    if (!Number.isInteger(v) || v < 1 || v > 65535) throw new RangeError(`${name} ${v} is outside 1..65535`);
  }
}
