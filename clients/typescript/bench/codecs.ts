// msgpackr against @msgpack/msgpack for this protocol: what each does with the cases the spec pins
// down (section 3), and how fast each encodes and decodes typical control payloads, next to this
// package's codec (the library plus its checks). `npm run bench`; the figures go to bench/NOTES.md.

import { Decoder as MDecoder, Encoder as MEncoder } from "@msgpack/msgpack";
import { Packr, Unpackr } from "msgpackr";

import { decodePayload, encodeFrame } from "../src/codec.js";
import { FrameType, type FrameInit } from "../src/frames.js";

const printable = (s: string): string =>
  s.replace(/a{20,}/g, (m) => `a×${m.length}`).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
const h = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, "hex"));
const hex = (b: Uint8Array): string => Buffer.from(b).toString("hex");

const unpackr = new Unpackr({ useRecords: false, mapsAsObjects: false, int64AsType: "bigint" });
const packr = new Packr({ useRecords: false });
const mdecoder = new MDecoder({ useBigInt64: true });
const mencoder = new MEncoder({ useBigInt64: true });

function show(f: () => unknown): string {
  try {
    return printable(JSON.stringify(f(), (_, v: unknown) =>
      typeof v === "bigint" ? `${v}n` : v instanceof Map ? Object.fromEntries(v) : v instanceof Uint8Array ? `bin:${hex(v)}` : v) ?? "undefined");
  } catch (e) {
    return `throws (${(e as Error).message.replace(/^STATUS_REPLY frame: /, "").slice(0, 40)})`;
  }
}

const decodeCases: [string, string][] = [
  ["str with invalid UTF-8 (c3 28)", "81a178a2c328"],
  ["integer map key", "810102"],
  ["nil map key", "81c002"],
  ["the never-used byte 0xc1", "c1"],
  ["trailing byte after a map", "80c0"],
  ["80.0 as float 64 (uint field)", "81a178cb4054000000000000"],
  ["uint 64 max", "81a178cfffffffffffffffff"],
  ["1 as uint 64 (non-minimal)", "81a178cf0000000000000001"],
  ["str starting with a BOM (300 bytes)", "81a178da012c" + "efbbbf" + "61".repeat(297)],
  ["key __proto__", "81a95f5f70726f746f5f5f01"],
];
const encodeCases: [string, unknown][] = [
  ["2 (integral number)", 2],
  ["2^32 (number)", 2 ** 32],
  ["1n (bigint)", 1n],
  ["2^40 (bigint)", 1n << 40n],
  ["lone surrogate \\ud800", "\ud800"],
];

console.log("## decoding\n\n| input | msgpackr | @msgpack/msgpack | this package |\n|---|---|---|---|");
for (const [name, bytes] of decodeCases) {
  const b = h(bytes);
  const ours = show(() => {
    // as STATUS_REPLY.info (a free-form map); 80.0 as RESIZE.cols, where the field is a uint
    if (name.startsWith("80.0")) return decodePayload(FrameType.RESIZE, h("82a4636f6c73" + bytes.slice(6) + "a4726f777318"));
    const f = decodePayload(FrameType.STATUS_REPLY, h("82a57374617465a178a4696e666f" + bytes));
    return f.type === "STATUS_REPLY" ? f.info : f;
  });
  console.log(`| ${name} | ${show(() => unpackr.unpack(b))} | ${show(() => mdecoder.decode(b))} | ${ours} |`);
}
console.log("\n## encoding\n\n| value | msgpackr | @msgpack/msgpack |\n|---|---|---|");
for (const [name, value] of encodeCases) {
  console.log(`| ${name} | ${show(() => hex(packr.pack(value)))} | ${show(() => hex(mencoder.encode(value)))} |`);
}

// ------------------------------------------------------------------------------------------ speed

const welcome: FrameInit = {
  type: "WELCOME", version: 2, name: "build", shellper_pid: 4242, shellper_start_time: 123456789,
  boot_id: "0d6ec1b5-6a4e-4b0e-9c36-3f1f8a2b7c11", instance_id: "9f2c4e61b0a84d7c8e5f1a3b2c4d6e8f", state: "running",
  cols: 120, rows: 40, ring_start: 0n, ring_end: 123456n, child_pid: 4243, last_output_at: 1767225600.125, event_seq: 42n,
  role: "tower",
};
const event: FrameInit = {
  type: "EVENT", seq: 7n, kind: "client_attached", time: 1767225600.5, data: { client_id: 3, role: "terminal", client: "x/1" },
};
const plain = (frame: FrameInit): Record<string, unknown> =>
  Object.fromEntries(Object.entries(frame).filter(([k, v]) => k !== "type" && v !== undefined)
    .map(([k, v]) => [k, typeof v === "bigint" ? Number(v) : v]));

function rate(f: () => unknown, n = 100_000): number {
  for (let i = 0; i < 2000; i++) f();
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) f();
  return n / (Number(process.hrtime.bigint() - start) / 1e9);
}

console.log("\n## speed (operations per second, median of 3)\n\n| payload | op | msgpackr | @msgpack/msgpack | this package |\n|---|---|---|---|---|");
for (const [name, frame] of [["WELCOME", welcome], ["EVENT", event]] as const) {
  const obj = plain(frame);
  const bytes = encodeFrame(frame);
  const payload = bytes.subarray(5);
  const code = bytes[0] as number;
  const median = (f: () => unknown): string => {
    const runs = [rate(f), rate(f), rate(f)].sort((a, b) => a - b);
    return `${Math.round((runs[1] as number) / 1000)} k`;
  };
  console.log(`| ${name} (${payload.length} B) | encode | ${median(() => packr.pack(obj))} | ${median(() => mencoder.encode(obj))} | ${median(() => encodeFrame(frame))} |`);
  console.log(`| ${name} (${payload.length} B) | decode | ${median(() => unpackr.unpack(payload))} | ${median(() => mdecoder.decode(payload))} | ${median(() => decodePayload(code, payload))} |`);
}
