// Every golden vector of protocol/vectors/, both ways: the bytes decode to the frame, the frame
// encodes to the exact bytes, and each invalid stream gives the documented error after the
// documented events.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { FrameDecoder, ProtocolError, decodeAll, encodeFrame, type Decoded } from "../src/codec.js";
import { FIELDS, Float64, FrameType, defaultOf, type FieldSpec, type FrameInit, type FrameName, type Value } from "../src/frames.js";
import { parseJson, type J } from "./vectorjson.js";

const VECTORS = process.env.SHELLPER_VECTORS !== undefined
  ? new URL(`file://${process.env.SHELLPER_VECTORS.replace(/\/?$/, "/")}`)
  : new URL("../../../../protocol/vectors/", import.meta.url);
const load = (name: string): Record<string, J>[] =>
  parseJson(readFileSync(new URL(name, VECTORS), "utf8")) as Record<string, J>[];

const hex = (b: Uint8Array): string => Buffer.from(b).toString("hex");
const unhex = (j: J): Uint8Array => new Uint8Array(Buffer.from((j as { hex: string }).hex, "hex"));
const isHex = (j: J): j is { hex: string } =>
  j !== null && typeof j === "object" && !Array.isArray(j) && !(j instanceof Float64) && Object.keys(j).length === 1 && "hex" in j;

/** A vector's JSON value as a free-form Value (floats stay Float64 so integral ones encode as floats). */
function toValue(j: J): Value {
  if (isHex(j)) return unhex(j);
  if (Array.isArray(j)) return j.map(toValue);
  if (j !== null && typeof j === "object" && !(j instanceof Float64)) {
    return Object.fromEntries(Object.entries(j).map(([k, v]) => [k, toValue(v)]));
  }
  return j;
}

/** A field's JSON value as the codec's typed value. */
function toField(spec: FieldSpec, j: J): unknown {
  if (j === null) return null;
  switch (spec.kind) {
    case "uint": case "int": return Number(j as bigint);
    case "u64": case "i64": return j as bigint;
    case "float": return j instanceof Float64 ? j.value : Number(j as bigint);
    case "bin": return unhex(j);
    default: return toValue(j);
  }
}

function frameOf(type: FrameName, fields: Record<string, J>): FrameInit {
  const out: Record<string, unknown> = { type };
  for (const spec of FIELDS[type]) if (spec.key in fields) out[spec.key] = toField(spec, fields[spec.key] as J);
  return out as FrameInit;
}

/** A comparable form: bytes as hex, bigints and numbers as their value, Float64 as its number. */
function canon(v: unknown): unknown {
  if (v instanceof Uint8Array) return { hex: hex(v) };
  if (v instanceof Float64) return v.value;
  if (typeof v === "bigint") return Number.isSafeInteger(Number(v)) ? Number(v) : `${v}n`;
  if (Array.isArray(v)) return v.map(canon);
  if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, canon(x)]));
  return v;
}

/** What decoding must give: the vector's fields, and the defaults of the fields it leaves out. */
function expected(type: FrameName, fields: Record<string, J>): unknown {
  const out: Record<string, unknown> = { type };
  for (const spec of FIELDS[type]) out[spec.key] = spec.key in fields ? toField(spec, fields[spec.key] as J) : defaultOf(spec);
  return canon(out);
}

function eventForm(d: Decoded): unknown {
  if (d.kind === "frame") return { kind: "frame", frame: canon(d.frame) };
  return { kind: d.kind, frame_type: d.frameType, length: d.length };
}

function expectedEvent(e: Record<string, J>): unknown {
  if (e.kind === "frame") return { kind: "frame", frame: expected(e.type as FrameName, e.fields as Record<string, J>) };
  return { kind: e.kind, frame_type: Number(e.frame_type as bigint), length: Number(e.length as bigint) };
}

const frames = load("frames.json");
const invalid = load("invalid.json");

test("the vector files hold cases of every frame type", () => {
  assert.ok(frames.length >= 50 && invalid.length >= 60);
  const types = new Set(frames.map((v) => v.type));
  for (const name of Object.keys(FrameType)) assert.ok(types.has(name), `no vector of ${name}`);
});

for (const v of frames) {
  const name = v.name as string;
  const type = v.type as FrameName;
  const fields = v.fields as Record<string, J>;
  const bytes = unhex({ hex: v.hex as string });

  test(`decode: ${name}`, () => {
    assert.equal(Number(v.code as bigint), FrameType[type]);
    const events = decodeAll(bytes);
    assert.equal(events.length, 1);
    assert.deepEqual(eventForm(events[0] as Decoded), { kind: "frame", frame: expected(type, fields) });
  });

  test(`decode split at every byte: ${name}`, () => {
    const decoder = new FrameDecoder();
    const got: Decoded[] = [];
    for (let i = 0; i < bytes.length; i++) {
      decoder.feed(bytes.subarray(i, i + 1));
      got.push(...decoder.frames());
    }
    decoder.close();
    assert.deepEqual(got.map(eventForm), [{ kind: "frame", frame: expected(type, fields) }]);
  });

  test(`encode: ${name}`, () => {
    const encoded = hex(encodeFrame(frameOf(type, fields)));
    assert.equal(encoded, v.hex);
  });
}

function streamOf(v: Record<string, J>): Uint8Array {
  if (typeof v.hex === "string") return unhex({ hex: v.hex });
  const parts: Buffer[] = [];
  for (const p of v.hex_parts as Record<string, J>[]) {
    if ("hex" in p) parts.push(Buffer.from(p.hex as string, "hex"));
    else parts.push(Buffer.from((p.repeat as string).repeat(Number(p.count as bigint)), "hex"));
  }
  return new Uint8Array(Buffer.concat(parts));
}

for (const v of invalid) {
  test(`stream: ${v.name as string}`, () => {
    const decoder = new FrameDecoder();
    const got: unknown[] = [];
    let error: ProtocolError | null = null;
    try {
      decoder.feed(streamOf(v));
      for (const d of decoder.frames()) got.push(eventForm(d));
      decoder.close();
    } catch (e) {
      if (!(e instanceof ProtocolError)) throw e;
      error = e;
    }
    assert.deepEqual(got, (v.events as Record<string, J>[]).map(expectedEvent));
    if (v.error === null) {
      assert.equal(error, null, `unexpected ${error?.code}: ${error?.message}`);
      return;
    }
    assert.ok(error !== null, `expected ${v.error as string}`);
    assert.equal(error.code, v.error);
    assert.equal(error.frameType, v.frame_type === null ? null : Number(v.frame_type as bigint));
    assert.equal(error.field, v.field);
  });
}

test("encoding refuses what the spec forbids, before anything is sent", () => {
  const refused: [FrameInit, string, string | null][] = [
    [{ type: "RESIZE", cols: 80 } as FrameInit, "missing_field", "rows"],
    [{ type: "RESIZE", cols: 80.5, rows: 24 }, "bad_field", "cols"],
    [{ type: "RESIZE", cols: -1, rows: 24 }, "bad_field", "cols"],
    [{ type: "SIGNAL", signal: "\ud800" }, "bad_field", "signal"],
    [{ type: "HELLO", version: 2, role: "tower", resume_from: 1n << 64n }, "bad_field", "resume_from"],
    [{ type: "SPAWN", argv: ["a", 1 as unknown as string] }, "bad_field", "argv"],
    [{ type: "SPAWN", env: { A: 1 as unknown as string } }, "bad_field", "env"],
    [{ type: "STOP", grace: "1" as unknown as number }, "bad_field", "grace"],
  ];
  for (const [frame, code, field] of refused) {
    assert.throws(() => encodeFrame(frame), (e: unknown) => e instanceof ProtocolError && e.code === code && e.field === field,
      JSON.stringify(frame, (_, x: unknown) => (typeof x === "bigint" ? `${x}n` : x)));
  }
});

test("integers take their shortest form at every width boundary", () => {
  const cases: [bigint, string][] = [
    [0n, "00"], [127n, "7f"], [128n, "cc80"], [255n, "ccff"], [256n, "cd0100"], [65535n, "cdffff"], [65536n, "ce00010000"],
    [(1n << 32n) - 1n, "ceffffffff"], [1n << 32n, "cf0000000100000000"], [(1n << 64n) - 1n, "cfffffffffffffffff"],
  ];
  for (const [n, want] of cases) {
    assert.equal(hex(encodeFrame({ type: "GAP", offset: n, missed: 0n })).slice(26, 26 + want.length), want, `${n}`);
  }
  const nonces: [bigint, string][] = [[-1n, "ff"], [-32n, "e0"], [-33n, "d0df"], [-(1n << 31n), "d280000000"],
    [-(1n << 31n) - 1n, "d3ffffffff7fffffff"], [-(1n << 63n), "d38000000000000000"]];
  for (const [n, want] of nonces) assert.ok(hex(encodeFrame({ type: "PING", nonce: n })).endsWith(want), `${n}`);
  // The library alone writes 2^32 as a float 64 and 1n as 8 bytes: the wrapper must not.
  assert.ok(hex(encodeFrame({ type: "RESIZE", cols: 2 ** 32, rows: 1 })).includes("cf0000000100000000"));
});

test("free-form maps: Float64 keeps an integral float a float, integers stay integers", () => {
  const bytes = encodeFrame({ type: "STATUS_REPLY", state: "running", info: { a: new Float64(2), b: 2, c: 2.5, d: 1n << 60n } });
  const payload = "82a57374617465a772756e6e696e67a4696e666f84" + "a161cb4000000000000000" + "a16202" + "a163cb4004000000000000"
    + "a164cf1000000000000000";
  assert.equal(hex(bytes).slice(10), payload);
  const back = decodeAll(bytes)[0];
  assert.ok(back?.kind === "frame" && back.frame.type === "STATUS_REPLY");
  assert.deepEqual(back.frame.info, { a: 2, b: 2, c: 2.5, d: 1n << 60n });
});

test("a str field keeps a leading U+FEFF, however long (the library alone drops it past 200 bytes)", () => {
  for (const length of [10, 300]) {
    const reason = "\ufeff" + "a".repeat(length);
    const back = decodeAll(encodeFrame({ type: "ERROR", code: "x", message: reason }))[0];
    assert.ok(back?.kind === "frame" && back.frame.type === "ERROR");
    assert.equal(back.frame.message, reason);
  }
});

test("a non-string key anywhere inside a map field is bad_payload (section 3: keys are strings at every depth)", () => {
  // STATUS_REPLY {state: "x", info: {a: {1: 2}}}
  const payload = Buffer.from("82a57374617465a178a4696e666f81a161810102", "hex");
  const frame = Buffer.concat([Buffer.from([0x0e, 0, 0, 0, payload.length]), payload]);
  assert.throws(() => decodeAll(frame), (e: unknown) => e instanceof ProtocolError && e.code === "bad_payload" && e.field === null);
});

test("a malformed request whose id can be read reports it (version 3: answered by REPLY, not a fatal ERROR)", () => {
  // RESIZE {cols: "80", rows: 24, id: 9}
  const withId = Buffer.from("020000001383a4636f6c73a23830a4726f777318a2696409", "hex");
  assert.throws(() => decodeAll(withId), (e: unknown) => e instanceof ProtocolError && e.field === "cols" && e.requestId === 9n);
  // RESIZE {cols: 80, rows: 24, id: "1"}: the id itself is unreadable
  const badId = Buffer.from("020000001283a4636f6c7350a4726f777318a26964a131", "hex");
  assert.throws(() => decodeAll(badId), (e: unknown) => e instanceof ProtocolError && e.field === "id" && e.requestId === null);
});
