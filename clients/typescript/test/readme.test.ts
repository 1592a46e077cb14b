// The README's Tower is examples/tower.ts, and it runs: against a live shellper in a private directory.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { test } from "node:test";

import { HAVE_SHELLPER, SHELLPER, Sessions, pollUntil } from "./live.js";

const PACKAGE = fileURLToPath(new URL("../../", import.meta.url));
const run = promisify(execFile);

test("the README shows examples/tower.ts, in twenty lines or fewer", () => {
  const example = readFileSync(join(PACKAGE, "examples", "tower.ts"), "utf8");
  assert.ok(readFileSync(join(PACKAGE, "README.md"), "utf8").includes("```ts\n" + example + "```"));
  assert.ok(example.trimEnd().split("\n").length <= 20);
});

test("the README's Tower launches a session, types into it, sees its exit and stops it", { skip: HAVE_SHELLPER ? false : `no shellper at ${SHELLPER}` }, async () => {
  const sessions = new Sessions();
  const env = { ...process.env, SHELLPER_DIR: sessions.dir, PATH: `${dirname(SHELLPER)}:${process.env.PATH ?? ""}` };
  try {
    const { stdout } = await run(process.execPath, [join(PACKAGE, "dist", "examples", "tower.js")], { env, timeout: 30_000 });
    assert.match(stdout, /hello from job/);
    assert.match(stdout, /\[crash: exit 3 .*session exited\]/);
    assert.match(stdout, /\[session over at offset \d+\]/);
    // The shellper closes its connections before it removes its files (PROTOCOL.md, STOP), and moves its log
    // to logs/ before it lets its lock go, last: until then, removing the directory races with that move.
    await pollUntil(() => !existsSync(join(sessions.dir, "job.sock")), 10_000, "the session's socket to go");
    await pollUntil(() => !existsSync(join(sessions.dir, "job.lock")), 10_000, "the session's lock to go");
  } finally {
    if (existsSync(join(sessions.dir, "job.sock"))) await run(SHELLPER, ["stop", "job", "--dir", sessions.dir]).catch(() => undefined);
    await sessions.cleanup();
  }
});
