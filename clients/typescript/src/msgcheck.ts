// A strict structural check of a msgpack payload before the library builds values from it.
//
// Neither JS msgpack library is strict where the spec is (section 3): both turn invalid UTF-8 into
// replacement characters, @msgpack/msgpack turns integer map keys into strings, and neither reports
// whether an integral number was sent as an integer or as a float (RESIZE `cols` as 80.0 must be
// refused). This walk checks what the spec requires, and records the wire family of each top-level
// value so that field kinds are checked against the bytes rather than against JS values.
// bench/NOTES.md ("TypeScript client: msgpack libraries") has the measurements.

export type Family = "nil" | "bool" | "int" | "float" | "str" | "bin" | "array" | "map" | "ext";

export interface ValueInfo {
  family: Family;
  /** array: every element a str. */
  strElements: boolean;
  /** map: every direct value a str. */
  strValues: boolean;
  /** int: the value is negative. */
  negative: boolean;
  /** str: its text, decoded keeping a leading U+FEFF (top-level values and their maps' values). */
  text: string | undefined;
  /** map (top-level values only): its entries' keys and what their values are on the wire. */
  entries: Map<string, ValueInfo> | undefined;
}

export class MsgpackInvalid extends Error {}

const MAX_DEPTH = 1000;
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Checks that `bytes` is exactly one msgpack map with str keys, every str valid UTF-8, nothing
 * after it; returns the top-level keys (decoded) with what their values are on the wire. */
export function checkPayload(bytes: Uint8Array): Map<string, ValueInfo> {
  const walker = new Walker(bytes);
  const head = walker.head();
  if (head.family !== "map") throw new MsgpackInvalid(`payload must be a msgpack map, got ${head.family}`);
  const out = new Map<string, ValueInfo>();
  for (let i = 0; i < head.count; i++) {
    const keyStart = walker.pos;
    const key = walker.value(1);
    if (key.family !== "str") throw new MsgpackInvalid("payload map keys must be strings");
    const name = walker.strAt(keyStart);
    const valueStart = walker.pos;
    const info = walker.value(1);
    if (info.family === "str") info.text = walker.strAt(valueStart);
    out.set(name, info);
  }
  if (walker.pos !== bytes.length) {
    throw new MsgpackInvalid(`${bytes.length - walker.pos} trailing bytes after the payload map`);
  }
  return out;
}

interface Head {
  family: Family;
  /** array/map: element or entry count; str/bin/ext: body length (ext: including its type byte). */
  count: number;
  negative: boolean;
}

class Walker {
  pos = 0;
  private readonly view: DataView;

  constructor(private readonly bytes: Uint8Array) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  private need(n: number): void {
    if (this.pos + n > this.bytes.length) throw new MsgpackInvalid("payload is truncated");
  }

  private u8(): number {
    this.need(1);
    return this.bytes[this.pos++] as number;
  }

  private uint(width: 1 | 2 | 4): number {
    this.need(width);
    const v = width === 1 ? this.view.getUint8(this.pos) : width === 2 ? this.view.getUint16(this.pos) : this.view.getUint32(this.pos);
    this.pos += width;
    return v;
  }

  private skip(n: number): void {
    this.need(n);
    this.pos += n;
  }

  /** Reads a head and moves past it (and past the bytes of scalars), leaving containers' contents. */
  head(): Head {
    const b = this.u8();
    if (b <= 0x7f) return { family: "int", count: 0, negative: false };
    if (b >= 0xe0) return { family: "int", count: 0, negative: true };
    if (b <= 0x8f) return { family: "map", count: b & 0x0f, negative: false };
    if (b <= 0x9f) return { family: "array", count: b & 0x0f, negative: false };
    if (b <= 0xbf) return { family: "str", count: b & 0x1f, negative: false };
    switch (b) {
      case 0xc0: return { family: "nil", count: 0, negative: false };
      case 0xc2: case 0xc3: return { family: "bool", count: 0, negative: false };
      case 0xc4: return { family: "bin", count: this.uint(1), negative: false };
      case 0xc5: return { family: "bin", count: this.uint(2), negative: false };
      case 0xc6: return { family: "bin", count: this.uint(4), negative: false };
      case 0xc7: return { family: "ext", count: this.uint(1) + 1, negative: false };
      case 0xc8: return { family: "ext", count: this.uint(2) + 1, negative: false };
      case 0xc9: return { family: "ext", count: this.uint(4) + 1, negative: false };
      case 0xca: this.skip(4); return { family: "float", count: 0, negative: false };
      case 0xcb: this.skip(8); return { family: "float", count: 0, negative: false };
      case 0xcc: this.skip(1); return { family: "int", count: 0, negative: false };
      case 0xcd: this.skip(2); return { family: "int", count: 0, negative: false };
      case 0xce: this.skip(4); return { family: "int", count: 0, negative: false };
      case 0xcf: this.skip(8); return { family: "int", count: 0, negative: false };
      case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        const width = 1 << (b - 0xd0);
        this.need(width);
        const negative = ((this.bytes[this.pos] as number) & 0x80) !== 0;
        this.pos += width;
        return { family: "int", count: 0, negative };
      }
      case 0xd4: return { family: "ext", count: 2, negative: false };
      case 0xd5: return { family: "ext", count: 3, negative: false };
      case 0xd6: return { family: "ext", count: 5, negative: false };
      case 0xd7: return { family: "ext", count: 9, negative: false };
      case 0xd8: return { family: "ext", count: 17, negative: false };
      case 0xd9: return { family: "str", count: this.uint(1), negative: false };
      case 0xda: return { family: "str", count: this.uint(2), negative: false };
      case 0xdb: return { family: "str", count: this.uint(4), negative: false };
      case 0xdc: return { family: "array", count: this.uint(2), negative: false };
      case 0xdd: return { family: "array", count: this.uint(4), negative: false };
      case 0xde: return { family: "map", count: this.uint(2), negative: false };
      case 0xdf: return { family: "map", count: this.uint(4), negative: false };
      default: throw new MsgpackInvalid(`byte 0x${b.toString(16)} is not msgpack`); // 0xc1
    }
  }

  /** Walks one whole value from here. */
  value(depth: number): ValueInfo {
    if (depth > MAX_DEPTH) throw new MsgpackInvalid(`values nested deeper than ${MAX_DEPTH}`);
    const head = this.head();
    const info: ValueInfo = {
      family: head.family, strElements: true, strValues: true,
      negative: head.negative, text: undefined, entries: undefined,
    };
    switch (head.family) {
      case "str": {
        this.need(head.count);
        if (!this.ascii(this.pos, head.count)) {
          try {
            utf8.decode(this.bytes.subarray(this.pos, this.pos + head.count));
          } catch {
            throw new MsgpackInvalid("a string is not valid UTF-8");
          }
        }
        this.pos += head.count;
        break;
      }
      case "bin": case "ext":
        this.skip(head.count);
        break;
      case "array":
        for (let i = 0; i < head.count; i++) {
          const item = this.value(depth + 1);
          info.strElements &&= item.family === "str";
        }
        break;
      case "map":
        if (depth === 1) info.entries = new Map();
        for (let i = 0; i < head.count; i++) {
          const keyStart = this.pos;
          const key = this.value(depth + 1);
          // string keys at every depth (section 3): a property of the encoding, so bad_payload
          if (key.family !== "str") throw new MsgpackInvalid(`a map key is ${key.family}, not a string`);
          const valueStart = this.pos;
          const val = this.value(depth + 1);
          info.strValues &&= val.family === "str";
          if (info.entries !== undefined) {
            if (val.family === "str") val.text = this.strAt(valueStart);
            info.entries.set(this.strAt(keyStart), val);
          }
        }
        break;
      default:
        break;
    }
    return info;
  }

  /** ASCII is valid UTF-8: most strings here are, and a byte loop costs less than a TextDecoder call. */
  private ascii(at: number, length: number): boolean {
    for (let i = at; i < at + length; i++) if ((this.bytes[i] as number) >= 0x80) return false;
    return true;
  }

  /** The str whose head starts at `start` (already checked). */
  strAt(start: number): string {
    const save = this.pos;
    this.pos = start;
    const head = this.head();
    const at = this.pos;
    this.pos = save;
    if (head.count < 64 && this.ascii(at, head.count)) {
      let text = "";
      for (let i = at; i < at + head.count; i++) text += String.fromCharCode(this.bytes[i] as number);
      return text;
    }
    return utf8.decode(this.bytes.subarray(at, at + head.count));
  }
}
