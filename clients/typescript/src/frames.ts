// The frames of the shellper wire protocol (protocol/PROTOCOL.md, sections 4 and 5) as TypeScript
// types, and the field tables the codec checks and encodes them by.
//
// Integers: fields that hold output offsets, byte counts, event sequence numbers and PING nonces are
// `bigint` (they are uint64/int64 on the wire and real shellpers go past 2^53); the others (sizes,
// pids, versions, exit codes) are `number`, and a value beyond 2^53 in one of those is refused.

/** Free-form values (map-typed fields such as `STATUS_REPLY.info`, `EVENT.data`): msgpack as decoded.
 * Integers are `number` when exact, else `bigint`; floats are `number`. A JS number cannot say
 * whether 2 was sent as an integer or a float; to send a float with an integral value inside a
 * free-form map, wrap it with {@link float64}. */
export type Value =
  | null
  | boolean
  | number
  | bigint
  | string
  | Uint8Array
  | Float64
  | Value[]
  | { [key: string]: Value };
export type ValueMap = { [key: string]: Value };

/** A number to be encoded as a msgpack float 64 even when it is integral (free-form maps only:
 * float-typed fields are always sent as float 64). */
export class Float64 {
  constructor(readonly value: number) {}
}
export function float64(value: number): Float64 {
  return new Float64(value);
}

export const FrameType = {
  DATA: 0x01,
  RESIZE: 0x02,
  SIGNAL: 0x03,
  EXIT: 0x04,
  REPLAY: 0x05,
  PING: 0x06,
  PONG: 0x07,
  HELLO: 0x08,
  WELCOME: 0x09,
  SPAWN: 0x0a,
  ERROR: 0x0b,
  EVENT: 0x0c,
  STATUS: 0x0d,
  STATUS_REPLY: 0x0e,
  STOP: 0x0f,
  GAP: 0x10,
  RELEASE: 0x11,
  REPLY: 0x12,
  SCREEN: 0x13,
  SCREEN_REPLY: 0x14,
  LABELS: 0x15,
} as const;
export type FrameName = keyof typeof FrameType;
export const FRAME_NAMES: ReadonlyMap<number, FrameName> = new Map(
  (Object.entries(FrameType) as [FrameName, number][]).map(([name, code]) => [code, name]),
);

/** The highest version this package speaks; a connection speaks WELCOME.version (section 12). */
export const PROTOCOL_VERSION = 3;
/** The first version in which requests carry an `id` and are answered by REPLY (section 7.5). */
export const REPLY_VERSION = 3;
export const MIN_PROTOCOL_VERSION = 2;
export const MAX_FRAME_SIZE = 16 * 1024 * 1024;
export const HEADER_SIZE = 5;
export const ROLES = ["tower", "terminal", "viewer"] as const;
export type Role = (typeof ROLES)[number];
/** Signal names a tower may send (without the SIG prefix), section 5 SIGNAL. */
export const SIGNALS = ["HUP", "INT", "QUIT", "TERM", "KILL", "CONT", "STOP", "TSTP", "WINCH", "USR1", "USR2"] as const;

export interface Data { type: "DATA"; data: Uint8Array }
export interface Resize { type: "RESIZE"; cols: number; rows: number; id: bigint | null }
export interface Signal { type: "SIGNAL"; signal: string; id: bigint | null }
export interface ExitRecord {
  restarts: number;
  breaker: ValueMap;
  spawn_error: string | null;
  code: number | null;
  signal: string | null;
  core: boolean;
  uptime: number;
  class: string;
  reason: string;
  state: string;
  child_pid: number | null;
  time: number;
  restart_in: number | null;
  stderr_tail: string;
}
export interface Exit extends ExitRecord { type: "EXIT" }
export interface Replay { type: "REPLAY"; offset: bigint; data: Uint8Array; gap: bigint; preamble: Uint8Array }
export interface Ping { type: "PING"; nonce: bigint | null }
export interface Pong { type: "PONG"; nonce: bigint | null }
export interface Hello {
  type: "HELLO";
  version: number;
  role: string;
  resume_from: bigint | null;
  replay_bytes: bigint | null;
  events_after: bigint | null;
  client: string;
  terminal: boolean | null;
  detach_byte: number | null;
  /** Version 3, a terminal or viewer: replay the rendered screen, after up to this many scrollback lines. */
  rendered: number | null;
  /** Version 3, a terminal that relays: its size, which the session takes before the replay. */
  cols?: number | null;
  rows?: number | null;
}
export interface Welcome {
  type: "WELCOME";
  version: number;
  name: string;
  shellper_pid: number;
  shellper_start_time: number;
  boot_id: string;
  instance_id: string;
  state: string;
  cols: number;
  rows: number;
  ring_start: bigint;
  ring_end: bigint;
  child_pid: number | null;
  state_reason: string;
  last_output_at: number | null;
  exit: ValueMap | null;
  event_seq: bigint;
  role: string;
  min_version: number;
  max_frame: number;
  terminal: boolean | null;
}
export interface Spawn {
  type: "SPAWN";
  argv: string[] | null;
  cwd: string | null;
  env: Record<string, string> | null;
  clear_ring: boolean;
  id: bigint | null;
}
export interface ErrorFrame { type: "ERROR"; code: string; message: string; frame_type: number | null; fatal: boolean }
export interface EventFrame { type: "EVENT"; seq: bigint; kind: string; time: number; data: ValueMap }
export interface Status { type: "STATUS"; id: bigint | null }
export interface StatusReply { type: "STATUS_REPLY"; state: string; info: ValueMap; id: bigint | null }
export interface Stop { type: "STOP"; grace: number | null; id: bigint | null }
/** ``preamble`` (version 3, a terminal or viewer): what to write instead of the missed bytes (PROTOCOL.md 8.4). */
export interface Gap { type: "GAP"; offset: bigint; missed: bigint; preamble?: Uint8Array | null }
export interface Release { type: "RELEASE"; reason: string; reset: Uint8Array; offset: bigint }
/** Version 3: a request for the rendered screen (section 8.5), answered by SCREEN_REPLY. */
export interface Screen { type: "SCREEN"; id: bigint | null; format: string; scrollback: number }
/** The screen of the moment: what a terminal attached now would show, at output `offset`. */
export interface ScreenReply {
  type: "SCREEN_REPLY";
  offset: bigint;
  cols: number;
  rows: number;
  lines: string[];
  cursor_x: number;
  cursor_y: number;
  cursor_visible: boolean;
  alternate: boolean;
  title: string;
  scrollback: string[];
  format: string;
  id: bigint | null;
}
/** Version 3: set the session's labels (an empty value removes one), answered by REPLY `{labels}`. */
export interface Labels { type: "LABELS"; set: Record<string, string>; id: bigint | null }
/** Version 3: the one answer to a request that carried an `id` (section 7.5). */
export interface Reply {
  type: "REPLY";
  id: bigint;
  frame_type: number;
  ok: boolean;
  code: string;
  message: string;
  result: ValueMap;
}

export type Frame =
  | Data | Resize | Signal | Exit | Replay | Ping | Pong | Hello | Welcome | Spawn
  | ErrorFrame | EventFrame | Status | StatusReply | Stop | Gap | Release | Reply | Screen | ScreenReply | Labels;
/** The requests that may carry an `id` on a version-3 connection. */
export const ID_REQUESTS: ReadonlySet<FrameName> = new Set<FrameName>(["RESIZE", "SIGNAL", "SPAWN", "STOP", "STATUS", "SCREEN", "LABELS"]);
export type FrameOf<N extends FrameName> = Extract<Frame, { type: N }>;

/** A frame to encode: optional fields may be left out (they take the table's default). */
export type FrameInit<N extends FrameName = FrameName> = N extends FrameName
  ? { type: N } & Partial<Omit<FrameOf<N>, "type">>
  : never;

// ------------------------------------------------------------------------------------ field tables

/** Field kinds: `uint`/`int` decode to number (refused beyond 2^53), `u64`/`i64` to bigint. */
export type Kind = "uint" | "int" | "u64" | "i64" | "float" | "str" | "bool" | "bin" | "str_list" | "str_map" | "map";

export interface FieldSpec {
  key: string;
  kind: Kind;
  required: boolean;
  nullable: boolean;
  /** Default of an absent optional field (null for "or nil" fields whose default is nil). */
  default?: unknown;
  /** Checked when present, but not written when absent or at its default (the exit record's extra
   * keys in an EXIT frame, 6.2). */
  extra?: boolean;
}

function req(key: string, kind: Kind, nullable = false): FieldSpec {
  return { key, kind, required: true, nullable };
}
function opt(key: string, kind: Kind, def: unknown, nullable = false): FieldSpec {
  return { key, kind, required: false, nullable, default: def };
}
function nil(key: string, kind: Kind): FieldSpec {
  return { key, kind, required: false, nullable: true, default: null };
}

const EMPTY = new Uint8Array(0);

/** The exit record (6.2): the EXIT payload, WELCOME.exit, EVENT exited's data, info.last_exit. */
export const EXIT_FIELDS: FieldSpec[] = [
  req("code", "int", true),
  req("signal", "str", true),
  req("core", "bool"),
  req("uptime", "float"),
  req("class", "str"),
  req("reason", "str"),
  req("state", "str"),
  nil("child_pid", "int"),
  req("time", "float"),
  nil("restart_in", "float"),
  req("stderr_tail", "str"),
  { ...opt("restarts", "int", 0), extra: true },
  { ...opt("breaker", "map", {}), extra: true },
  { ...nil("spawn_error", "str"), extra: true },
];

/** Every control frame's fields, in the order the reference encoder writes them (section 5). */
export const FIELDS: { readonly [N in FrameName]: readonly FieldSpec[] } = {
  DATA: [opt("data", "bin", EMPTY)],
  RESIZE: [req("cols", "uint"), req("rows", "uint"), nil("id", "u64")],
  SIGNAL: [req("signal", "str"), nil("id", "u64")],
  EXIT: EXIT_FIELDS,
  REPLAY: [req("offset", "u64"), opt("data", "bin", EMPTY), opt("gap", "u64", 0n), opt("preamble", "bin", EMPTY)],
  PING: [nil("nonce", "i64")],
  PONG: [nil("nonce", "i64")],
  HELLO: [
    req("version", "uint"),
    req("role", "str"),
    nil("resume_from", "u64"),
    nil("replay_bytes", "u64"),
    nil("events_after", "u64"),
    opt("client", "str", ""),
    nil("terminal", "bool"),
    nil("detach_byte", "uint"),
    nil("rendered", "uint"),
    nil("cols", "uint"),
    nil("rows", "uint"),
  ],
  WELCOME: [
    req("version", "uint"),
    req("name", "str"),
    req("shellper_pid", "uint"),
    req("shellper_start_time", "uint"),
    req("boot_id", "str"),
    req("instance_id", "str"),
    req("state", "str"),
    req("cols", "uint"),
    req("rows", "uint"),
    req("ring_start", "u64"),
    req("ring_end", "u64"),
    nil("child_pid", "int"),
    opt("state_reason", "str", ""),
    nil("last_output_at", "float"),
    nil("exit", "map"),
    opt("event_seq", "u64", 0n),
    opt("role", "str", ""),
    opt("min_version", "uint", MIN_PROTOCOL_VERSION),
    opt("max_frame", "uint", MAX_FRAME_SIZE),
    nil("terminal", "bool"),
  ],
  SPAWN: [nil("argv", "str_list"), nil("cwd", "str"), nil("env", "str_map"), opt("clear_ring", "bool", false), nil("id", "u64")],
  ERROR: [req("code", "str"), req("message", "str"), nil("frame_type", "uint"), opt("fatal", "bool", false)],
  EVENT: [req("seq", "u64"), req("kind", "str"), opt("time", "float", 0), opt("data", "map", {})],
  STATUS: [nil("id", "u64")],
  STATUS_REPLY: [req("state", "str"), opt("info", "map", {}), nil("id", "u64")],
  STOP: [nil("grace", "float"), nil("id", "u64")],
  GAP: [req("offset", "u64"), req("missed", "u64"), nil("preamble", "bin")],
  RELEASE: [req("reason", "str"), opt("reset", "bin", EMPTY), opt("offset", "u64", 0n)],
  REPLY: [req("id", "u64"), req("frame_type", "uint"), req("ok", "bool"), opt("code", "str", ""), opt("message", "str", ""),
    opt("result", "map", {})],
  SCREEN: [nil("id", "u64"), opt("format", "str", "text"), opt("scrollback", "uint", 0)],
  LABELS: [opt("set", "str_map", {}), nil("id", "u64")],
  SCREEN_REPLY: [
    req("offset", "u64"),
    req("cols", "uint"),
    req("rows", "uint"),
    opt("lines", "str_list", []),
    opt("cursor_x", "uint", 0),
    opt("cursor_y", "uint", 0),
    opt("cursor_visible", "bool", true),
    opt("alternate", "bool", false),
    opt("title", "str", ""),
    opt("scrollback", "str_list", []),
    opt("format", "str", "text"),
    nil("id", "u64"),
  ],
};

/** The default of an absent optional field, fresh (maps are not shared between frames). */
export function defaultOf(spec: FieldSpec): unknown {
  const d = spec.default;
  if (d instanceof Uint8Array) return new Uint8Array(0);
  if (Array.isArray(d)) return [];
  if (d !== null && typeof d === "object") return {};
  return d;
}

/** A complete frame from its type and some fields: absent optional fields take their defaults. */
export function makeFrame<N extends FrameName>(init: { type: N } & Partial<Omit<FrameOf<N>, "type">>): FrameOf<N> {
  const out: Record<string, unknown> = { type: init.type };
  const given = init as unknown as Record<string, unknown>;
  for (const spec of FIELDS[init.type]) {
    const value = given[spec.key];
    out[spec.key] = value === undefined ? defaultOf(spec) : value;
  }
  return out as unknown as FrameOf<N>;
}

/** The typed exit record of a free-form map (`WELCOME.exit`, `EVENT exited` data, checked by the
 * codec; `info.last_exit`, not checked), or null if it is not one (lenient: wrong-typed fields take
 * their defaults). */
export function exitRecordOf(map: ValueMap | null | undefined): ExitRecord | null {
  if (map === null || map === undefined || !("code" in map) || !("signal" in map)) return null;
  const num = (v: unknown, d: number): number => (typeof v === "number" ? v : v instanceof Float64 ? v.value : d);
  const str = (v: unknown, d: string): string => (typeof v === "string" ? v : d);
  const int = (v: unknown): number | null => (typeof v === "number" && Number.isInteger(v) ? v : null);
  return {
    code: int(map.code),
    signal: typeof map.signal === "string" ? map.signal : null,
    core: map.core === true,
    uptime: num(map.uptime, 0),
    class: str(map.class, ""),
    reason: str(map.reason, ""),
    state: str(map.state, ""),
    child_pid: int(map.child_pid),
    time: num(map.time, 0),
    restart_in: map.restart_in === null || map.restart_in === undefined ? null : num(map.restart_in, 0),
    stderr_tail: str(map.stderr_tail, ""),
    restarts: int(map.restarts) ?? 0,
    breaker: map.breaker !== null && typeof map.breaker === "object" && !Array.isArray(map.breaker) ? (map.breaker as ValueMap) : {},
    spawn_error: typeof map.spawn_error === "string" ? map.spawn_error : null,
  };
}
