// The golden vectors' JSON, read exactly: integers may exceed 2^53 (JSON.parse would round them) and
// a float written `2.0` must stay a float. So integers become bigint and floats Float64 here.

import { Float64 } from "../src/frames.js";

export type J = null | boolean | bigint | Float64 | string | J[] | { [key: string]: J };

export function parseJson(text: string): J {
  let pos = 0;
  const ws = (): void => {
    while (pos < text.length && " \t\r\n".includes(text[pos] as string)) pos++;
  };
  const value = (): J => tagged(raw());
  const raw = (): J => {
    ws();
    const c = text[pos];
    if (c === "{") {
      pos++;
      const out: { [key: string]: J } = {};
      ws();
      if (text[pos] === "}") { pos++; return out; }
      for (;;) {
        ws();
        const key = value();
        if (typeof key !== "string") throw new SyntaxError(`object key at ${pos}`);
        ws();
        if (text[pos++] !== ":") throw new SyntaxError(`':' expected at ${pos}`);
        out[key] = value();
        ws();
        const sep = text[pos++];
        if (sep === "}") return out;
        if (sep !== ",") throw new SyntaxError(`',' expected at ${pos}`);
      }
    }
    if (c === "[") {
      pos++;
      const out: J[] = [];
      ws();
      if (text[pos] === "]") { pos++; return out; }
      for (;;) {
        out.push(value());
        ws();
        const sep = text[pos++];
        if (sep === "]") return out;
        if (sep !== ",") throw new SyntaxError(`',' expected at ${pos}`);
      }
    }
    if (c === '"') {
      const start = pos;
      pos++;
      while (text[pos] !== '"') pos += text[pos] === "\\" ? 2 : 1;
      pos++;
      return JSON.parse(text.slice(start, pos)) as string;
    }
    for (const [word, v] of [["true", true], ["false", false], ["null", null]] as const) {
      if (text.startsWith(word, pos)) { pos += word.length; return v; }
    }
    const m = /^-?\d+(\.\d+)?([eE][-+]?\d+)?/.exec(text.slice(pos, pos + 400));
    if (m === null) throw new SyntaxError(`unexpected ${c} at ${pos}`);
    pos += m[0].length;
    return m[1] !== undefined || m[2] !== undefined ? new Float64(Number(m[0])) : BigInt(m[0]);
  };
  /** {"float": x}: a msgpack float (section 14). */
  const tagged = (v: J): J => {
    if (v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof Float64)) {
      const keys = Object.keys(v);
      if (keys.length === 1 && keys[0] === "float") {
        const x = v.float as J;
        return new Float64(x instanceof Float64 ? x.value : Number(x as bigint));
      }
    }
    return v;
  };
  const out = value();
  ws();
  if (pos !== text.length) throw new SyntaxError(`trailing text at ${pos}`);
  return out;
}
