// The frame codec: frames to bytes and back (PROTOCOL.md sections 2 and 3), on @msgpack/msgpack.
//
// The library builds and writes msgpack values; this module decides everything the spec pins down
// that the library would do its own way: the payload is checked first by msgcheck (strict UTF-8,
// string keys, trailing bytes, the wire type of each field), float fields are always written as
// float 64, integers always in their shortest form (the library writes 2^32 as a float and a bigint
// in 8 bytes), and map keys go out in the order of the field tables. Only public options are used.

import { Decoder, Encoder } from "@msgpack/msgpack";
import {
  EXIT_FIELDS, FIELDS, FRAME_NAMES, Float64, FrameType, HEADER_SIZE, ID_REQUESTS, MAX_FRAME_SIZE, defaultOf,
  type FieldSpec, type Frame, type FrameInit, type FrameName, type Value,
} from "./frames.js";
import { MsgpackInvalid, checkPayload, type ValueInfo } from "./msgcheck.js";

/** A frame that cannot be accepted (or sent). `code` is the ERROR code the spec gives it (section 10). */
export class ProtocolError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly frameType: number | null = null,
    readonly field: string | null = null,
  ) {
    super(frameType === null ? message : `${typeName(frameType)} frame: ${message}`);
    this.name = "ProtocolError";
  }

  /** A malformed request's `id`, when it could still be read (version 3: a shellper then answers
   * with a REPLY and keeps the connection). */
  requestId: bigint | null = null;
}

export function typeName(code: number): string {
  return FRAME_NAMES.get(code) ?? `0x${code.toString(16).padStart(2, "0")}`;
}

const enc = new Encoder({ useBigInt64: true });
const encFloat = new Encoder({ forceIntegerToFloat: true });
const U64_LIMIT = 1n << 64n;
const I64_MIN = -(1n << 63n);

// ------------------------------------------------------------------------------------------ encode

/** The bytes of one frame. Fields left out take their defaults; a field of the wrong type or range
 * raises ProtocolError (`missing_field` / `bad_field`), so a malformed frame is never sent. */
export function encodeFrame(frame: FrameInit): Uint8Array {
  const code = FrameType[frame.type];
  if (code === undefined) throw new ProtocolError("protocol", `unknown frame type ${String(frame.type)}`);
  if (frame.type === "DATA") {
    const data = (frame as { data?: Uint8Array }).data ?? new Uint8Array(0);
    if (!(data instanceof Uint8Array)) throw new ProtocolError("bad_field", "field 'data' must be binary", code, "data");
    return withHeader(code, data);
  }
  const given = frame as unknown as Record<string, unknown>;
  const parts: Uint8Array[] = [];
  let count = 0;
  for (const spec of FIELDS[frame.type]) {
    let value = given[spec.key];
    if (spec.extra && (value === undefined || value === null || value === spec.default
      || (isPlainObject(value) && Object.keys(value).length === 0))) continue;
    if (value === undefined) {
      if (spec.required) throw new ProtocolError("missing_field", `missing required field '${spec.key}'`, code, spec.key);
      value = defaultOf(spec);
    }
    if (value === null) {
      if (!spec.nullable) throw new ProtocolError("bad_field", `field '${spec.key}' may not be nil`, code, spec.key);
      if (!spec.required && spec.default === null) continue; // optional and absent: left out, as the reference does
    }
    parts.push(keyBytes(spec.key), value === null ? NIL : encodeField(spec, value, code));
    count++;
  }
  return withHeader(code, concat([mapHeader(count), ...parts]));
}

/** A DATA frame's bytes (the hot path: no object, no msgpack). */
export function encodeData(data: Uint8Array): Uint8Array {
  return withHeader(FrameType.DATA, data);
}

const NIL = Uint8Array.of(0xc0);
const KEYS = new Map<string, Uint8Array>();

/** A field name's msgpack bytes, made once: the field tables are fixed. */
function keyBytes(key: string): Uint8Array {
  let bytes = KEYS.get(key);
  if (bytes === undefined) {
    bytes = enc.encode(key);
    KEYS.set(key, bytes);
  }
  return bytes;
}

function withHeader(code: number, payload: Uint8Array): Uint8Array {
  if (payload.length > 0xffffffff) throw new ProtocolError("too_large", `payload of ${payload.length} bytes`, code);
  const out = new Uint8Array(HEADER_SIZE + payload.length);
  out[0] = code;
  new DataView(out.buffer).setUint32(1, payload.length);
  out.set(payload, HEADER_SIZE);
  return out;
}

function encodeField(spec: FieldSpec, value: unknown, code: number): Uint8Array {
  const bad = (want: string): never => {
    throw new ProtocolError("bad_field", `field '${spec.key}' must be ${want}`, code, spec.key);
  };
  switch (spec.kind) {
    case "uint": case "u64":
      if (!isInteger(value) || BigInt(value) < 0n || BigInt(value) >= U64_LIMIT) bad("an unsigned integer");
      return encodeInt(value as number | bigint);
    case "int": case "i64":
      if (!isInteger(value) || BigInt(value) < I64_MIN || BigInt(value) >= U64_LIMIT) bad("an integer");
      return encodeInt(value as number | bigint);
    case "float":
      if (typeof value !== "number") bad("a number");
      return encFloat.encode(value);
    case "str":
      if (!isWellFormed(value)) bad("a string of valid Unicode");
      return enc.encode(value);
    case "bool":
      if (typeof value !== "boolean") bad("a boolean");
      return enc.encode(value);
    case "bin":
      if (!(value instanceof Uint8Array)) bad("binary");
      return enc.encode(value);
    case "str_list":
      if (!Array.isArray(value) || !value.every(isWellFormed)) bad("an array of strings");
      return encodeValue(value as Value);
    case "str_map":
      if (!isPlainObject(value) || !Object.values(value).every(isWellFormed)) bad("a map of string to string");
      return encodeValue(value as Value);
    case "map":
      if (!isPlainObject(value)) bad("a map with string keys");
      return encodeValue(value as Value);
  }
}

function isInteger(value: unknown): value is number | bigint {
  return typeof value === "bigint" || (typeof value === "number" && Number.isSafeInteger(value));
}

function isWellFormed(value: unknown): value is string {
  // String.prototype.isWellFormed (Node 20): a lone surrogate has no UTF-8 form; the library would
  // write its invalid 3-byte form.
  return typeof value === "string" && (value as unknown as { isWellFormed(): boolean }).isWellFormed();
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array)
    && !(value instanceof Float64);
}

/** An integer in its shortest msgpack form. The library writes a number of 2^32 or more as a
 * float 64 and every bigint in 8 bytes, so the form is chosen here. */
function encodeInt(value: number | bigint): Uint8Array {
  const n = typeof value === "bigint" ? value : BigInt(value);
  if (n >= -(1n << 31n) && n < 1n << 32n) return enc.encode(Number(n));
  return enc.encode(n); // uint 64 (0xcf) when positive, int 64 (0xd3) when negative: the only forms left
}

/** A free-form value. Integral numbers are integers, other numbers float 64; Float64 is float 64. */
export function encodeValue(value: Value): Uint8Array {
  if (value === null || value === undefined) return NIL;
  if (typeof value === "number") {
    return Number.isSafeInteger(value) && !Object.is(value, -0) ? encodeInt(value) : encFloat.encode(value);
  }
  if (typeof value === "bigint") {
    if (value < I64_MIN || value >= U64_LIMIT) throw new ProtocolError("bad_field", `integer ${value} does not fit 64 bits`);
    return encodeInt(value);
  }
  if (value instanceof Float64) return encFloat.encode(value.value);
  if (typeof value === "string") {
    if (!isWellFormed(value)) throw new ProtocolError("bad_field", "a string with a lone surrogate has no UTF-8 form");
    return enc.encode(value);
  }
  if (typeof value === "boolean" || value instanceof Uint8Array) return enc.encode(value);
  if (Array.isArray(value)) return concat([arrayHeader(value.length), ...value.map(encodeValue)]);
  const entries = Object.entries(value).filter(([, v]) => v !== undefined);
  const parts: Uint8Array[] = [mapHeader(entries.length)];
  for (const [k, v] of entries) parts.push(encodeValue(k), encodeValue(v));
  return concat(parts);
}

function mapHeader(n: number): Uint8Array {
  if (n < 16) return Uint8Array.of(0x80 | n);
  if (n < 0x10000) return Uint8Array.of(0xde, n >> 8, n & 0xff);
  return Uint8Array.of(0xdf, n >>> 24, (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
}

function arrayHeader(n: number): Uint8Array {
  if (n < 16) return Uint8Array.of(0x90 | n);
  if (n < 0x10000) return Uint8Array.of(0xdc, n >> 8, n & 0xff);
  return Uint8Array.of(0xdd, n >>> 24, (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
}

export function concat(parts: Uint8Array[]): Uint8Array {
  let size = 0;
  for (const p of parts) size += p.length;
  const out = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

// ------------------------------------------------------------------------------------------ decode

/** Keys that are not strings can only sit in nested maps here (msgcheck refuses them at the top,
 * and fields that are maps are refused with `bad_field`): a placeholder keeps the library going. */
const mapKeyConverter = (key: unknown): string | number => (typeof key === "string" ? key : "\u0000non-string key");

// One decoder, reused (decode() is synchronous): the library's decode() function makes a new one per
// call, which cost a WELCOME decode 4 times the time (bench/NOTES.md).
const dec = new Decoder({ useBigInt64: true, mapKeyConverter });

/** The frame of a known type from its payload (an empty control payload is the empty map). */
export function decodePayload(code: number, payload: Uint8Array): Frame {
  const name = FRAME_NAMES.get(code);
  if (name === undefined) throw new ProtocolError("protocol", `unknown frame type ${typeName(code)}`, code);
  if (name === "DATA") return { type: "DATA", data: payload };
  let infos: Map<string, ValueInfo>;
  let values: Record<string, unknown>;
  if (payload.length === 0) {
    infos = new Map();
    values = {};
  } else {
    try {
      infos = checkPayload(payload);
      values = dec.decode(payload) as Record<string, unknown>;
    } catch (error) {
      const why = error instanceof MsgpackInvalid ? error.message : `payload is not accepted (${(error as Error).message})`;
      throw new ProtocolError("bad_payload", why, code);
    }
  }
  const frame: Record<string, unknown> = { type: name };
  try {
    for (const spec of FIELDS[name]) {
      const info = infos.get(spec.key);
      if (info === undefined) {
        if (spec.required) throw new ProtocolError("missing_field", `missing required field '${spec.key}'`, code, spec.key);
        frame[spec.key] = defaultOf(spec);
      } else {
        frame[spec.key] = decodeField(spec, info, values[spec.key], code);
      }
    }
    checkExitRecords(name, frame, infos, code);
  } catch (error) {
    const id = infos.get("id");
    if (error instanceof ProtocolError && ID_REQUESTS.has(name) && id?.family === "int" && !id.negative) {
      error.requestId = BigInt(values.id as number | bigint);
    }
    throw error;
  }
  return frame as unknown as Frame;
}

/** The exit record inside WELCOME (`exit`) and `EVENT exited` (`data`), checked as in EXIT (6.2),
 * after the frame's own fields: a failure is bad_field naming the carrier, the message the key. */
function checkExitRecords(name: FrameName, frame: Record<string, unknown>, infos: Map<string, ValueInfo>, code: number): void {
  let carrier: "exit" | "data";
  if (name === "WELCOME" && frame.exit !== null) carrier = "exit";
  else if (name === "EVENT" && frame.kind === "exited") carrier = "data";
  else return;
  const entries = infos.get(carrier)?.entries;
  if (entries === undefined) {
    throw new ProtocolError("bad_field", `field '${carrier}' must be an exit record`, code, carrier);
  }
  for (const spec of EXIT_FIELDS) {
    const info = entries.get(spec.key);
    let why: string | null = null;
    if (info === undefined) why = spec.required ? "is missing" : null;
    else if (info.family === "nil") why = spec.nullable ? null : "may not be nil";
    else if (!FAMILIES[spec.kind].includes(info.family)) why = `must be ${KIND_WORDS[spec.kind]}, got ${info.family}`;
    if (why !== null) {
      throw new ProtocolError("bad_field", `field '${carrier}' is not an exit record: its '${spec.key}' ${why}`, code, carrier);
    }
  }
}

/** The wire families each kind accepts (for nested records, where only the family is at hand). */
const FAMILIES: Record<FieldSpec["kind"], readonly string[]> = {
  uint: ["int"], int: ["int"], u64: ["int"], i64: ["int"], float: ["float", "int"], str: ["str"], bool: ["bool"],
  bin: ["bin"], str_list: ["array"], str_map: ["map"], map: ["map"],
};

const KIND_WORDS: Record<FieldSpec["kind"], string> = {
  uint: "an unsigned integer", int: "an integer", u64: "an unsigned integer", i64: "an integer", float: "a number",
  str: "a string", bool: "a boolean", bin: "binary", str_list: "an array of strings",
  str_map: "a map of string to string", map: "a map with string keys",
};

function decodeField(spec: FieldSpec, info: ValueInfo, value: unknown, code: number): unknown {
  const bad = (detail = ""): never => {
    const want = KIND_WORDS[spec.kind] + (spec.nullable ? " or nil" : "");
    throw new ProtocolError("bad_field", `field '${spec.key}' must be ${want}, got ${info.family}${detail}`, code, spec.key);
  };
  if (info.family === "nil") return spec.nullable ? null : bad();
  switch (spec.kind) {
    case "uint": case "int": {
      if (info.family !== "int" || (spec.kind === "uint" && info.negative)) return bad();
      const n = Number(value);
      return Number.isSafeInteger(n) ? n : bad(" beyond 2^53 (not exact in a JS number)");
    }
    case "u64": case "i64":
      if (info.family !== "int" || (spec.kind === "u64" && info.negative)) return bad();
      return BigInt(value as number | bigint);
    case "float":
      return info.family === "float" || info.family === "int" ? Number(value) : bad();
    case "str":
      // msgcheck's text, not the library's: the library drops a leading U+FEFF from strings over 200 bytes
      return info.family === "str" ? info.text : bad();
    case "bool":
      return info.family === "bool" ? value : bad();
    case "bin":
      return info.family === "bin" ? value : bad();
    case "str_list":
      return info.family === "array" && info.strElements ? value : bad();
    case "str_map":
      return info.family === "map" && info.strValues ? value : bad();
    case "map":
      return info.family === "map" ? normalize(value) : bad();
  }
}

/** Free-form values as documented for Value: exact integers as numbers, larger ones as bigints. */
function normalize(value: unknown): Value {
  if (typeof value === "bigint") {
    return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value;
  }
  if (Array.isArray(value)) return value.map(normalize);
  if (value !== null && typeof value === "object" && !(value instanceof Uint8Array) && Object.getPrototypeOf(value) === Object.prototype) {
    const out: Record<string, Value> = {};
    for (const [k, v] of Object.entries(value)) out[k] = normalize(v);
    return out;
  }
  return value as Value;
}

// ------------------------------------------------------------------------------------------ stream

export type Decoded =
  | { kind: "frame"; frame: Frame }
  /** A frame longer than the limit: its payload was discarded as it arrived (section 2). */
  | { kind: "skipped"; frameType: number; length: number }
  /** A frame of a type this codec does not know: a newer peer's, skipped. */
  | { kind: "unknown"; frameType: number; length: number };

/** Incremental decoder: feed bytes split anywhere, take frames out. Memory is bounded by the frame
 * limit plus one fed chunk. A bad frame throws ProtocolError after it has been consumed. */
export class FrameDecoder {
  private chunks: Uint8Array[] = [];
  private size = 0;
  private skip = 0;
  private skipType = 0;

  constructor(readonly maxFrame: number = MAX_FRAME_SIZE) {}

  /** Bytes held, waiting for the rest of a frame. */
  get buffered(): number {
    return this.size;
  }

  feed(chunk: Uint8Array): void {
    if (this.skip > 0) {
      const drop = Math.min(this.skip, chunk.length);
      this.skip -= drop;
      chunk = chunk.subarray(drop);
    }
    if (chunk.length > 0) {
      this.chunks.push(chunk);
      this.size += chunk.length;
    }
  }

  /** The next complete frame (or skipped/unknown marker), or null until more bytes arrive. */
  next(): Decoded | null {
    if (this.size < HEADER_SIZE) return null;
    const header = this.peek(HEADER_SIZE);
    const code = header[0] as number;
    const length = new DataView(header.buffer, header.byteOffset, HEADER_SIZE).getUint32(1);
    if (length > this.maxFrame) {
      this.take(HEADER_SIZE);
      const drop = Math.min(length, this.size);
      this.take(drop);
      this.skip = length - drop;
      this.skipType = code;
      return { kind: "skipped", frameType: code, length };
    }
    if (this.size < HEADER_SIZE + length) return null;
    this.take(HEADER_SIZE);
    const payload = this.take(length);
    if (!FRAME_NAMES.has(code)) return { kind: "unknown", frameType: code, length };
    return { kind: "frame", frame: decodePayload(code, payload) };
  }

  /** Every complete frame now buffered. */
  *frames(): Generator<Decoded> {
    for (let d = this.next(); d !== null; d = this.next()) yield d;
  }

  /** The stream ended: throws `truncated` if it ended inside a frame. */
  close(): void {
    const remaining = this.size + this.skip;
    if (remaining > 0) {
      const code = this.size > 0 ? (this.peek(1)[0] as number) : this.skipType;
      this.chunks = [];
      this.size = 0;
      this.skip = 0;
      throw new ProtocolError("truncated", `stream ended inside a frame: ${remaining} bytes missing or unparsed`, code);
    }
  }

  private peek(n: number): Uint8Array {
    const first = this.chunks[0] as Uint8Array;
    if (first.length >= n) return first.subarray(0, n);
    const merged = concat(this.chunks);
    this.chunks = [merged];
    return merged.subarray(0, n);
  }

  /** Removes and returns the first n bytes (a copy when they span chunks). */
  private take(n: number): Uint8Array {
    if (n === 0) return new Uint8Array(0);
    const first = this.chunks[0] as Uint8Array;
    let out: Uint8Array;
    if (first.length >= n) {
      out = first.subarray(0, n);
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
    } else {
      out = new Uint8Array(n);
      let at = 0;
      while (at < n) {
        const chunk = this.chunks[0] as Uint8Array;
        const use = Math.min(chunk.length, n - at);
        out.set(chunk.subarray(0, use), at);
        at += use;
        if (use === chunk.length) this.chunks.shift();
        else this.chunks[0] = chunk.subarray(use);
      }
    }
    this.size -= n;
    return out;
  }
}

/** Decodes a complete byte string; throws `truncated` if it ends inside a frame. */
export function decodeAll(bytes: Uint8Array, maxFrame: number = MAX_FRAME_SIZE): Decoded[] {
  const decoder = new FrameDecoder(maxFrame);
  decoder.feed(bytes);
  const out = [...decoder.frames()];
  decoder.close();
  return out;
}

export type { FrameName };
