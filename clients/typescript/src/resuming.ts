// A client that outlives its connections: when one ends (the shellper restarted its socket, the
// tower's side dropped it, a `too_slow`), it reconnects with `resume_from` = the offset it has
// handed out and `events_after` = the last event, and hands its caller one stream: no byte twice,
// none skipped without a GAP that counts it (PROTOCOL.md 8.2, 8.3).

import {
  Client, ConnectionRefused, ProtocolViolation, RemoteError, SessionGone, SessionNotFound, ShellperDead, Timeout, shellperAlive,
  type ClientError, type ConnectOptions, type RequestInit, type SpawnOptions,
} from "./client.js";
import type { Exit, Frame, Reply, ScreenReply, StatusReply, Welcome } from "./frames.js";

export interface Backoff {
  initialMs: number;
  factor: number;
  maxMs: number;
  /** Reconnection attempts before giving up. */
  maxAttempts: number;
}
export const DEFAULT_BACKOFF: Backoff = { initialMs: 50, factor: 2, maxMs: 2000, maxAttempts: 8 };

/** Handed out right after a reconnection, before the resumed output. */
export interface Reconnected {
  type: "RECONNECTED";
  welcome: Welcome;
  /** The offset asked for (everything before it was handed out already). */
  resumedFrom: bigint;
  /** Bytes the ring no longer held (a GAP item follows when non-zero). */
  gap: bigint;
  attempts: number;
  /** Terminal modes in effect where the output resumes: for a terminal, not output. */
  preamble: Uint8Array;
}
export type ResumeItem = Frame | Reconnected;

/** Fatal ERROR codes after which reconnecting makes sense; others (`replaced`, `forbidden`, ...) would repeat. */
const RESUMABLE_ERRORS = new Set(["too_slow", "busy", "frame_timeout"]);
/** EXIT states after which the shellper goes away on purpose. */
const ENDED_STATES = new Set(["stopping"]);

function retryable(error: unknown): boolean {
  return error instanceof SessionNotFound || error instanceof ConnectionRefused || error instanceof Timeout
    || error instanceof SessionGone;
}

export interface ResumingOptions extends ConnectOptions {
  backoff?: Backoff;
}

export class ResumingClient implements AsyncIterable<ResumeItem> {
  /** The offset of the next output byte handed out. */
  nextOffset = 0n;
  lastEventSeq: bigint | null = null;
  exit: Exit | null = null;
  /** The session's state as the last WELCOME, EXIT or `state` event handed out said. */
  sessionState: string;
  reconnects = 0;
  instanceId: string;
  private readonly items: ResumeItem[] = [];
  private ended: Error | null = null;
  /** STOP was sent: the connection's end is the stream's end. */
  private stopping = false;

  private constructor(readonly path: string, private current: Client, private readonly options: ResumingOptions) {
    this.instanceId = current.welcome.instance_id;
    this.sessionState = current.welcome.state;
    this.lastEventSeq = current.lastEventSeq;
    this.nextOffset = current.replay.offset - current.replay.gap;
    this.queueReplay(current);
  }

  /** Connects (as Client.connect) and returns once WELCOME and REPLAY are in; the REPLAY's history
   * is handed out as items (a GAP if part of it was gone, then DATA). */
  static async connect(path: string, options: ResumingOptions = {}): Promise<ResumingClient> {
    const client = await Client.connect(path, options);
    const asked = options.eventsAfter != null ? BigInt(options.eventsAfter) : null;
    if (asked != null && client.welcome.event_seq < asked) {
      client.abort(); // what a current shellper refuses as bad_offset, and an older one accepted silently
      throw new ProtocolViolation(path, `asked for the events after ${asked}, the session's last event is ${client.welcome.event_seq}`);
    }
    return new ResumingClient(path, client, options);
  }

  get welcome(): Welcome {
    return this.current.welcome;
  }

  get client(): Client {
    return this.current;
  }

  private queueReplay(client: Client): void {
    const replay = client.replay;
    if (replay.gap > 0n) this.items.push({ type: "GAP", offset: replay.offset, missed: replay.gap });
    if (replay.data.length > 0) this.items.push({ type: "DATA", data: replay.data });
  }

  private deliver(item: ResumeItem): ResumeItem {
    switch (item.type) {
      case "DATA": this.nextOffset += BigInt(item.data.length); break;
      case "GAP": this.nextOffset = item.offset; break;
      case "EVENT":
        if (item.seq > 0n) this.lastEventSeq = item.seq;
        if (item.kind === "state" && typeof item.data.state === "string") this.sessionState = item.data.state;
        break;
      case "EXIT":
        this.exit = item;
        if (item.state !== "") this.sessionState = item.state;
        break;
      case "RECONNECTED": this.sessionState = item.welcome.state; break;
      default: break;
    }
    return item;
  }

  /** The next item, null after `timeoutMs` with nothing; reconnects as needed. Throws the error the
   * stream ended with (SessionGone after the session stopped, RemoteError `replaced`, ...). */
  async recv(timeoutMs?: number): Promise<ResumeItem | null> {
    for (;;) {
      const queued = this.items.shift();
      if (queued !== undefined) return this.deliver(queued);
      if (this.ended !== null) throw this.ended;
      try {
        const frame = await this.current.recv(timeoutMs);
        return frame === null ? null : this.deliver(frame);
      } catch (error) {
        if (!(error instanceof Error)) throw error;
        this.lost(error);
        await this.reconnect();
      }
    }
  }

  private lost(error: Error): void {
    if (this.ended !== null) throw this.ended; // closed by the caller meanwhile
    const stopped = this.stopping || ENDED_STATES.has(this.sessionState);
    const fatal = error instanceof RemoteError && !RESUMABLE_ERRORS.has(error.error.code);
    if (stopped || fatal || !(error instanceof SessionGone || error instanceof RemoteError)) {
      this.ended = error;
      throw error;
    }
  }

  private async reconnect(): Promise<void> {
    const backoff = this.options.backoff ?? DEFAULT_BACKOFF;
    for (let attempt = 1; ; attempt++) {
      const delay = Math.min(backoff.maxMs, backoff.initialMs * backoff.factor ** (attempt - 1));
      await new Promise((resolve) => setTimeout(resolve, delay));
      const asked = this.nextOffset;
      let client: Client;
      try {
        client = await Client.connect(this.path, {
          ...this.options, resumeFrom: asked, replayBytes: null, eventsAfter: this.lastEventSeq, expectInstanceId: this.instanceId,
        });
      } catch (error) {
        if ((error instanceof SessionNotFound || error instanceof ConnectionRefused) && !shellperAlive(this.current.welcome)) {
          // a stale socket: nothing will answer there again, so the backoff is not waited out
          const pid = this.current.welcome.shellper_pid;
          this.ended = new ShellperDead(this.path, `the shellper (pid ${pid}) is no longer running`);
          throw this.ended;
        }
        if (!retryable(error) || attempt >= backoff.maxAttempts) {
          this.ended = error as ClientError;
          throw error;
        }
        continue;
      }
      const replay = client.replay;
      if (replay.offset - replay.gap !== asked) {
        client.abort();
        this.ended = new ProtocolViolation(this.path, `asked to resume at ${asked}, REPLAY starts at ${replay.offset} with a gap of ${replay.gap}`);
        throw this.ended;
      }
      if (this.lastEventSeq != null && client.welcome.event_seq < this.lastEventSeq) {
        // what a current shellper refuses as bad_offset, and an older one accepted silently
        client.abort();
        this.ended = new ProtocolViolation(this.path, `asked for the events after ${this.lastEventSeq}, the session's last event is ${client.welcome.event_seq}`);
        throw this.ended;
      }
      this.current = client;
      this.reconnects++;
      this.items.push({ type: "RECONNECTED", welcome: client.welcome, resumedFrom: asked, gap: replay.gap, attempts: attempt, preamble: replay.preamble });
      this.queueReplay(client);
      return;
    }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<ResumeItem> {
    for (;;) {
      let item: ResumeItem | null;
      try {
        item = await this.recv();
      } catch (error) {
        if (error instanceof SessionGone) return;
        throw error;
      }
      if (item !== null) yield item;
    }
  }

  write(data: Uint8Array | string): void { this.current.write(data); }
  resize(cols: number, rows: number): void { this.current.resize(cols, rows); }
  signal(name: string): void { this.current.signal(name); }
  spawn(options?: SpawnOptions): void { this.current.spawn(options); }
  /** End the session; the stream ends with it (no reconnection after the shellper goes). */
  stop(grace?: number | null): void {
    this.current.stop(grace);
    this.stopping = true;
  }
  status(timeoutMs?: number): Promise<StatusReply> { return this.current.status(timeoutMs); }
  ping(timeoutMs?: number): Promise<void> { return this.current.ping(timeoutMs); }
  screen(options?: { format?: "text" | "ansi"; scrollback?: number }, timeoutMs?: number): Promise<ScreenReply> {
    return this.current.screen(options, timeoutMs);
  }
  /** Version 3 (Client.request) on the current connection; a STOP ends the stream as stop() does. */
  request(frame: RequestInit, timeoutMs?: number): Promise<Reply> {
    const answered = this.current.request(frame, timeoutMs);
    if (frame.type === "STOP") this.stopping = true;
    return answered;
  }

  /** Ends the stream and closes the connection (the session carries on). */
  async close(): Promise<void> {
    this.ended ??= new SessionGone(this.path, "closed by this client");
    await this.current.close();
  }
}
