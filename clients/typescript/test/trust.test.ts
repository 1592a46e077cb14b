// Issue 27: a socket another user could have planted is refused before anything is sent (the directory
// check; Node reads no SO_PEERCRED, so a server of another uid in a directory of ours is not caught here).

import assert from "node:assert/strict";
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import net from "node:net";
import { join } from "node:path";
import { test } from "node:test";

import { Client, ResumingClient, UntrustedSocket, dirRefusal } from "../src/index.js";

const NOBODY = 65534;
const ROOT = process.geteuid?.() === 0;

test("dirRefusal is the shellper's rule, as a table", () => {
  const dir = 0o040000;
  const cases: [number, number, string | null][] = [
    [dir | 0o700, 1000, null],
    [dir | 0o750, 1000, "is group/world accessible (mode 0750)"],
    [dir | 0o1777, 1000, "is group/world accessible (mode 1777)"],
    [dir | 0o700, 0, "is owned by uid 0, not by us (uid 1000)"],
    [0o120000 | 0o777, 1000, "is a symlink"],
    [0o100000 | 0o600, 1000, "exists but is not a directory"],
  ];
  for (const [mode, uid, want] of cases) {
    const why = dirRefusal("/d", mode, uid, 1000);
    if (want === null) assert.equal(why, null);
    else assert.ok(why !== null && why.startsWith(want), `${mode.toString(8)}: ${why}`);
  }
});

for (const kind of ["foreign", "open", "symlink"] as const) {
  test(`a socket in a planted directory (${kind}) is refused before connecting`, { skip: !ROOT && "needs root (chown)", timeout: 10_000 }, async () => {
    const base = mkdtempSync("/tmp/spts-");
    chmodSync(base, 0o755);
    const victim = join(base, "shellper-0");
    let serveDir = victim;
    if (kind === "foreign") {
      mkdirSync(victim, 0o700);
      chownSync(victim, NOBODY, NOBODY);
    } else if (kind === "open") {
      mkdirSync(victim);
      chmodSync(victim, 0o1777);
    } else {
      serveDir = join(base, "theirs");
      mkdirSync(serveDir, 0o700);
      chownSync(serveDir, NOBODY, NOBODY);
      symlinkSync(serveDir, victim);
    }
    let connections = 0;
    const server = net.createServer((socket) => {
      connections++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => server.listen(join(serveDir, "work.sock"), resolve));
    try {
      const path = join(victim, "work.sock");
      for (const connect of [() => Client.connect(path), () => ResumingClient.connect(path)]) {
        await assert.rejects(connect(), (e: unknown) => e instanceof UntrustedSocket && e.path === path && e.message.includes("not trusted"));
      }
      assert.equal(connections, 0);
    } finally {
      await new Promise((resolve) => server.close(resolve));
      rmSync(base, { recursive: true, force: true });
    }
  });
}
