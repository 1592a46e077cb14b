// End to end against live shellpers: handshake, input and output, resize, signal, spawn, stop,
// resume without loss and with exact gaps, roles, versioning.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, test } from "node:test";

import {
  Client, ClientError, InstanceMismatch, PROTOCOL_VERSION, RemoteError, RequestFailed, ResumingClient, SessionGone,
  SessionNotFound, ShellperDead, type EventFrame, type Exit, type Frame,
} from "../src/index.js";
import { HAVE_SHELLPER, SHELLPER, Sessions, alive, connected, pollUntil, readUntil } from "./live.js";

const skip = HAVE_SHELLPER ? false : `no shellper at ${SHELLPER} (run make, or set SHELLPER)`;

/** What `seq 1 n` prints through a PTY (which turns \n into \r\n). */
function seqOutput(n: number): Buffer {
  const lines: string[] = [];
  for (let i = 1; i <= n; i++) lines.push(`${i}\r\n`);
  return Buffer.from(lines.join(""), "latin1");
}

const has = (type: string) => (frames: { type: string }[]): boolean => frames.some((f) => f.type === type);
const event = (kind: string) => (frames: { type: string }[]): boolean =>
  frames.some((f) => f.type === "EVENT" && (f as EventFrame).kind === kind);

describe("against a live shellper", { skip, concurrency: false, timeout: 240_000 }, () => {
  let sessions: Sessions;
  before(() => {
    sessions = new Sessions();
  });
  after(async () => {
    await sessions.cleanup();
  });

  test("handshake: WELCOME names the shellper that was launched, REPLAY follows, history is complete", async () => {
    const info = await sessions.launch("hs", ["sh", "-c", "printf 'ready\\n'; exec cat"]);
    await connected(info.socket, { expectInstanceId: info.instance_id }, async (c) => {
      const w = c.welcome;
      assert.equal(w.name, "hs");
      assert.equal(w.shellper_pid, info.pid);
      assert.equal(w.instance_id, info.instance_id);
      assert.equal(w.role, "tower");
      assert.equal(w.version, PROTOCOL_VERSION);
      assert.equal(w.min_version, 2);
      assert.equal(c.replay.offset, w.ring_start);
      assert.equal(c.nextOffset, w.ring_end); // the whole history fits one REPLAY
      if (w.ring_end === 0n) await readUntil(c, (_, out) => out.includes("ready"));
      else assert.match(Buffer.from(c.replay.data).toString(), /ready/);
      assert.equal(w.state, "running");
      assert.equal(w.child_pid, info.child_pid);
    });
    await assert.rejects(Client.connect(info.socket, { expectInstanceId: "0".repeat(32) }), InstanceMismatch);
    await assert.rejects(Client.connect(`${sessions.dir}/nobody.sock`), SessionNotFound);
  });

  test("input and output, STATUS and PING answered by promises", async () => {
    const info = await sessions.launch("io", ["cat"]);
    await connected(info.socket, { replayBytes: 0 }, async (c) => {
      c.write("hello-ts\n");
      const { output } = await readUntil(c, (_, out) => out.split("hello-ts").length >= 3);
      assert.match(output, /hello-ts\r\nhello-ts\r\n/); // the tty's echo, then cat's copy
      const status = await c.status();
      assert.equal(status.state, "running");
      await c.ping();
      c.write(new Uint8Array([0xc3, 0xa9, 0x0a])); // bytes pass through untouched
      await readUntil(c, (_, out) => out.split("\xc3\xa9").length >= 3);
    });
  });

  test("resize: applied, SIGWINCH reaches the child, EVENT resized, the next WELCOME has the size", async () => {
    const info = await sessions.launch("rs", ["bash", "--norc", "-c", "trap 'stty size' WINCH; echo armed; while :; do sleep 0.2 & wait $!; done"]);
    await connected(info.socket, {}, async (c) => {
      // the trap is set once "armed" is out: in the REPLAY if it came before this connection
      if (!Buffer.from(c.replay.data).toString().includes("armed")) await readUntil(c, (_, out) => out.includes("armed"));
      c.resize(101, 33);
      const { frames, output } = await readUntil(c, (fs, out) => event("resized")(fs) && out.includes("33 101"));
      const resized = frames.find((f) => f.type === "EVENT" && (f as EventFrame).kind === "resized") as EventFrame;
      assert.deepEqual(resized.data, { cols: 101, rows: 33 });
      assert.match(output, /33 101/);
      assert.throws(() => c.resize(0, 10), RangeError); // refused here: the shellper would close the connection
    });
    await connected(info.socket, { role: "viewer" }, async (v) => {
      assert.equal(v.welcome.cols, 101);
      assert.equal(v.welcome.rows, 33);
    });
  });

  test("signal: the child's process group gets it; its EXIT says so; unknown names are refused", async () => {
    const info = await sessions.launch("sg", ["cat"], ["--restart", "no"]);
    await connected(info.socket, {}, async (c) => {
      assert.throws(() => c.signal("BOGUS"), RangeError);
      c.send({ type: "SIGNAL", signal: "BOGUS" }); // past the local check: the shellper's answer
      const refused = await readUntil(c, has("ERROR"));
      const error = refused.frames.find((f) => f.type === "ERROR") as Frame & { type: "ERROR" };
      assert.equal(error.code, "bad_signal");
      assert.equal(error.fatal, false);
      c.signal("term");
      const { frames } = await readUntil(c, has("EXIT"));
      const exit = frames.find((f) => f.type === "EXIT") as Exit;
      assert.equal(exit.signal, "SIGTERM");
      assert.equal(exit.code, null);
      assert.equal(exit.class, "requested");
      assert.equal(exit.state, "exited");
      assert.equal(c.exit, exit);
      assert.equal(c.sessionState, "exited");
      const isState = (f: { type: string }): boolean => f.type === "EVENT" && (f as EventFrame).kind === "state"
        && (f as EventFrame).data.state === "exited";
      const seen = frames.some(isState) ? frames : (await readUntil(c, (fs) => fs.some(isState))).frames;
      const state = seen.find(isState) as EventFrame;
      assert.equal(state.data.state, "exited"); // every change of state is an event (version 3)
      assert.equal(state.data.previous, "running");
      assert.equal(c.sessionState, "exited");
      c.write("x");
      const late = await readUntil(c, (fs) => fs.some((f) => f.type === "ERROR" && (f as unknown as { code: string }).code === "not_running"));
      assert.ok(late.frames.length >= 1);
    });
  });

  test("spawn: replaces the child (EXIT requested, EVENT spawned, new output); a bad command is refused", async () => {
    const info = await sessions.launch("sp", ["cat"]);
    await connected(info.socket, { replayBytes: 0 }, async (c) => {
      c.spawn({ argv: ["sh", "-c", "echo spawned-$((6*7)); exec cat"], env: { TS_CLIENT: "1" } });
      const { frames, output } = await readUntil(c, (fs, out) => event("spawned")(fs) && out.includes("spawned-42"));
      const exit = frames.find((f) => f.type === "EXIT") as Exit;
      assert.equal(exit.class, "requested");
      const spawned = frames.find((f) => f.type === "EVENT" && (f as EventFrame).kind === "spawned") as EventFrame;
      assert.deepEqual(spawned.data.argv, ["sh", "-c", "echo spawned-$((6*7)); exec cat"]);
      assert.match(output, /spawned-42/);
      c.spawn({ argv: ["/nonexistent/program"] });
      const refused = await readUntil(c, has("ERROR"));
      const error = refused.frames.find((f) => f.type === "ERROR") as Frame & { type: "ERROR" };
      assert.equal(error.code, "spawn_failed");
      assert.equal(error.fatal, false);
      assert.equal((await c.status()).state, "running"); // the running child was left alone
    });
  });

  test("stop: EXIT with state stopping, the connection ends, the shellper and its socket are gone", async () => {
    const info = await sessions.launch("st", ["cat"]);
    const c = await Client.connect(info.socket);
    c.stop(1);
    const frames: Frame[] = [];
    for await (const frame of c) frames.push(frame);
    const exit = frames.find((f) => f.type === "EXIT") as Exit;
    assert.equal(exit.state, "stopping");
    assert.equal(exit.class, "requested");
    assert.ok(c.closedError instanceof SessionGone);
    await c.closed;
    await pollUntil(() => !alive(info.pid), 10_000, "the shellper to exit");
    assert.equal(existsSync(info.socket), false);
  });

  test("resume with no loss: a resuming client dropped twice mid-flood hands out every byte once", async () => {
    // The output comes in three parts, each printed only once the test has made a file: each drop happens
    // while a part is still unprinted, so the client must reconnect twice whatever size its items have.
    const n = 200_000; // about 1.3 MB: more than one REPLAY chunk
    const expected = seqOutput(n);
    const firstPart = seqOutput(100_000).length;
    const secondPart = seqOutput(150_000).length;
    const gates = mkdtempSync(join(tmpdir(), "rz-"));
    const wait = (gate: string) => `while [ ! -e ${gates}/${gate} ]; do sleep 0.02; done`;
    const script = `seq 1 100000; ${wait("a")}; seq 100001 150000; ${wait("b")}; seq 150001 ${n}; exec cat`;
    const info = await sessions.launch("rz", ["sh", "-c", script]);
    const rc = await ResumingClient.connect(info.socket, { resumeFrom: 0 });
    const got: Buffer[] = [];
    let size = 0;
    let drops = 0;
    try {
      const deadline = Date.now() + 30_000;
      while (size < expected.length) {
        const item = await rc.recv(Math.max(1, deadline - Date.now()));
        assert.ok(item !== null, `timed out at ${size} of ${expected.length} bytes`);
        assert.notEqual(item.type, "GAP");
        if (item.type === "DATA") {
          got.push(Buffer.from(item.data));
          size += item.data.length;
          if ((drops === 0 && size > 0) || (drops === 1 && size > firstPart)) {
            drops++;
            rc.client.abort(); // the connection is lost, not the stream
          }
          if (size === firstPart) writeFileSync(join(gates, "a"), "");
          if (size === secondPart) writeFileSync(join(gates, "b"), "");
        }
        if (item.type === "RECONNECTED") assert.equal(item.gap, 0n);
      }
      assert.equal(drops, 2);
      assert.equal(rc.reconnects, 2);
      assert.equal(rc.nextOffset, BigInt(expected.length));
      assert.ok(Buffer.concat(got).equals(expected), "the stream differs from seq's output");
    } finally {
      await rc.close();
      rmSync(gates, { recursive: true, force: true });
    }
  });

  test("a resuming client ends at once with ShellperDead when its shellper is killed, not after its backoff", async () => {
    const info = await sessions.launch("dd", ["cat"]);
    const rc = await ResumingClient.connect(info.socket, { replayBytes: 0 });
    try {
      assert.equal(rc.sessionState, "running");
      assert.match(readFileSync(`/proc/${info.pid}/cmdline`, "latin1"), /shellper/); // ours: launched above
      process.kill(info.pid, "SIGKILL");
      const started = Date.now();
      const ended = async (): Promise<never> => {
        for (;;) assert.notEqual(await rc.recv(20_000), null); // frames sent before the kill, then the end
      };
      await assert.rejects(ended(), ShellperDead);
      const took = Date.now() - started;
      assert.ok(took < 1000, `${took} ms: the backoff (about 6 s) was waited out`);
    } finally {
      await rc.close().catch(() => undefined);
      // what its tree left running, and its files: `shellper stop` of a dead shellper ends them
      await promisify(execFile)(SHELLPER, ["stop", "dd", "--dir", sessions.dir]).catch(() => undefined);
    }
  });

  test("exact gaps: resuming from before the ring says how much is gone and continues at ring_start", async () => {
    const n = 100_000;
    const expected = seqOutput(n); // about 690 KB into a 64 KiB ring
    const info = await sessions.launch("gp", ["sh", "-c", `seq 1 ${n}; exec cat`], ["--ring-bytes", "65536"]);
    await pollUntil(async () => connected(info.socket, { role: "viewer", replayBytes: 0 }, async (v) => v.welcome.ring_end === BigInt(expected.length)),
      20_000, "the whole output");
    await connected(info.socket, { role: "viewer", resumeFrom: 1000 }, async (v) => {
      const start = v.welcome.ring_start;
      assert.ok(start > 1000n && v.welcome.ring_end - start <= 65536n);
      assert.equal(v.replay.offset, start);
      assert.equal(v.replay.gap, start - 1000n);
      assert.equal(v.missed, start - 1000n);
      assert.equal(v.nextOffset, BigInt(expected.length));
      assert.ok(Buffer.from(v.replay.data).equals(expected.subarray(Number(start))));
    });
    const rc = await ResumingClient.connect(info.socket, { role: "viewer", resumeFrom: 0 });
    try {
      const first = await rc.recv(5000);
      assert.ok(first?.type === "GAP");
      assert.equal(first.missed, first.offset);
      assert.equal(rc.nextOffset, first.offset);
    } finally {
      await rc.close();
    }
    const tooFar = Client.connect(info.socket, { role: "viewer", resumeFrom: BigInt(expected.length) + 1n });
    await assert.rejects(tooFar, (e: unknown) => e instanceof RemoteError && e.error.code === "bad_offset" && e.error.fatal);
    const probe = await Client.connect(info.socket, { role: "viewer", replayBytes: 0 });
    const last = probe.welcome.event_seq;
    await probe.close();
    const eventsTooFar = Client.connect(info.socket, { role: "viewer", replayBytes: 0, eventsAfter: last + 1n });
    await assert.rejects(eventsTooFar, (e: unknown) => e instanceof RemoteError && e.error.code === "bad_offset" && e.error.fatal);
  });

  test("exact gaps, live: a viewer that stops reading is not waited for; each GAP counts exactly what it lost", async () => {
    const n = 150_000;
    // the tty's echo of the trigger, then about 1 MB through a 64 KiB ring, then a marker
    const expected = Buffer.concat([Buffer.from("go\r\n"), seqOutput(n), Buffer.from("done-flood\r\n")]);
    const total = BigInt(expected.length);
    const info = await sessions.launch("lg", ["sh", "-c", `read go; seq 1 ${n}; echo done-flood; exec cat`], ["--ring-bytes", "65536"]);
    const viewer = await Client.connect(info.socket, { role: "viewer", replayBytes: 0, maxBuffered: 1 });
    try {
      assert.equal(viewer.nextOffset, 0n);
      await connected(info.socket, { replayBytes: 0 }, async (tower) => {
        tower.write("go\n"); // and the tower leaves at once: nobody holds the child back
      });
      // the viewer reads nothing until the whole flood is in the ring
      await pollUntil(async () => connected(info.socket, { role: "viewer", replayBytes: 0 }, async (v) => v.welcome.ring_end === total),
        20_000, "the whole flood");
      let received = 0n;
      let missed = 0n;
      let gaps = 0;
      const deadline = Date.now() + 30_000;
      while (viewer.nextOffset < total) {
        const frame = await viewer.recv(Math.max(1, deadline - Date.now()));
        assert.ok(frame !== null, `timed out at ${viewer.nextOffset}`);
        if (frame.type === "GAP") {
          gaps++;
          missed += frame.missed;
        } else if (frame.type === "DATA") {
          const at = Number(viewer.nextOffset) - frame.data.length; // recv has moved nextOffset past it
          assert.ok(Buffer.from(frame.data).equals(expected.subarray(at, at + frame.data.length)), `bytes at ${at} differ`);
          received += BigInt(frame.data.length);
        }
      }
      assert.ok(gaps >= 1 && missed > 0n, "the viewer was never behind the ring");
      assert.equal(received + missed, total); // every offset received or counted, once
      assert.equal(viewer.missed, missed);
    } finally {
      await viewer.close();
    }
  });

  test("roles: viewers and terminals are refused what is the tower's; events on request; a new tower replaces the old", async () => {
    const info = await sessions.launch("ro", ["cat"]);
    const tower = await Client.connect(info.socket, { replayBytes: 0 });
    try {
      await connected(info.socket, { role: "viewer", replayBytes: 0 }, async (v) => {
        v.write("from-viewer\n");
        v.resize(90, 20);
        const { frames } = await readUntil(v, (fs) => fs.filter((f) => f.type === "ERROR").length >= 2);
        for (const f of frames.filter((x) => x.type === "ERROR") as (Frame & { type: "ERROR" })[]) {
          assert.equal(f.code, "forbidden");
          assert.equal(f.fatal, false);
        }
        await v.ping(); // still connected
      });
      await connected(info.socket, { role: "terminal", replayBytes: 0, eventsAfter: 0 }, async (t) => {
        const held = await readUntil(t, event("spawned")); // held events, because it asked
        assert.ok(held.frames.some((f) => f.type === "EVENT" && (f as EventFrame).seq === 1n));
        t.signal("INT");
        t.stop();
        t.spawn({});
        const { frames } = await readUntil(t, (fs) => fs.filter((f) => f.type === "ERROR").length >= 3);
        assert.deepEqual(frames.filter((f) => f.type === "ERROR").map((f) => (f as unknown as { code: string }).code), ["forbidden", "forbidden", "forbidden"]);
        t.write("from-terminal\n"); // a terminal may type
        await readUntil(t, (_, out) => out.includes("from-terminal"));
      });
      const second = await Client.connect(info.socket, { replayBytes: 0 });
      try {
        await assert.rejects(readUntil(tower, () => false), (e: unknown) => e instanceof RemoteError && e.error.code === "replaced" && e.error.fatal);
        assert.equal((await second.status()).state, "running");
      } finally {
        await second.close();
      }
    } finally {
      await tower.close();
    }
  });

  test("versioning: version 1 is refused, a newer client is answered in the shellper's version", async () => {
    const info = await sessions.launch("vs", ["cat"]);
    await assert.rejects(Client.connect(info.socket, { version: 1 }),
      (e: unknown) => e instanceof RemoteError && e.error.code === "unsupported_version" && e.error.fatal);
    await connected(info.socket, { role: "viewer", version: 99 }, async (c) => {
      assert.equal(c.welcome.version, 3); // the shellper's own: the lower of the two
      assert.equal(c.version, 3);
      assert.equal(c.welcome.min_version, 2);
    });
    await connected(info.socket, { role: "viewer", version: 2 }, async (c) => {
      assert.equal(c.welcome.version, 2);
    });
  });

  test("version 3: each request with an id gets one REPLY; a refusal leaves the connection up", async () => {
    const info = await sessions.launch("v3", ["cat"]);
    await connected(info.socket, { replayBytes: 0 }, async (c) => {
      assert.equal(c.version, 3);
      const resized = await c.request({ type: "RESIZE", cols: 88, rows: 22 });
      assert.equal(resized.ok, true);
      assert.equal(resized.frame_type, 0x02);
      assert.deepEqual(resized.result, { cols: 88, rows: 22 });
      const refusals: [Parameters<Client["request"]>[0], string][] = [
        [{ type: "SIGNAL", signal: "BOGUS" }, "bad_signal"],
        [{ type: "RESIZE", cols: 0, rows: 22 }, "bad_field"], // fatal without an id
        [{ type: "SPAWN", argv: ["/nonexistent/program"] }, "spawn_failed"],
      ];
      for (const [frame, code] of refusals) {
        await assert.rejects(c.request(frame), (e: unknown) => e instanceof RequestFailed && e.reply.code === code && !e.reply.ok);
      }
      assert.equal((await c.status()).state, "running"); // STATUS with an id: its STATUS_REPLY carries it
      const spawned = await c.request({ type: "SPAWN", argv: ["sh", "-c", "echo v3-spawned; exec cat"] });
      assert.equal(typeof spawned.result.child_pid, "number");
      assert.deepEqual(spawned.result.argv, ["sh", "-c", "echo v3-spawned; exec cat"]);
      // ordered like EXIT and EVENT: the old child's EXIT and the new child's EVENT spawned came first
      const { frames } = await readUntil(c, (fs, out) => has("EXIT")(fs) && event("spawned")(fs) && out.includes("v3-spawned"));
      assert.ok(frames.some((f) => f.type === "EVENT" && (f as EventFrame).data.child_pid === spawned.result.child_pid));
      const signalled = await c.request({ type: "SIGNAL", signal: "CONT" });
      assert.deepEqual(signalled.result, { signal: "SIGCONT", pid: spawned.result.child_pid });
      await connected(info.socket, { role: "viewer" }, async (v) => {
        await assert.rejects(v.request({ type: "STOP" }), (e: unknown) => e instanceof RequestFailed && e.reply.code === "forbidden");
        await v.ping();
      });
      await connected(info.socket, { role: "viewer", version: 2 }, async (v2) => {
        await assert.rejects(v2.request({ type: "RESIZE", cols: 80, rows: 24 }), (e: unknown) => e instanceof ClientError && /version 2/.test(e.message));
        assert.equal((await v2.status()).state, "running"); // version 2: matched in order, no id
      });
      const stopped = await c.request({ type: "STOP", grace: 1 });
      assert.equal(stopped.result.child_pid, spawned.result.child_pid);
      const rest: Frame[] = [];
      for await (const frame of c) rest.push(frame); // the EXIT came before the REPLY; then the end
      assert.ok(rest.some((f) => f.type === "EXIT" && f.state === "stopping"));
    });
    await pollUntil(() => !alive(info.pid), 10_000, "the shellper to exit");
  });

  test("version 3: SCREEN gives the screen of the moment; a rendered replay draws it instead of bytes", async () => {
    const info = await sessions.launch("sc", ["sh", "-c", "printf '\\033]0;ts-title\\007line one\\nline two\\n'; exec cat"]);
    await connected(info.socket, { role: "viewer" }, async (v) => {
      await pollUntil(async () => (await v.screen()).lines.includes("line two"), 10_000, "the output on the screen");
      const screen = await v.screen({ format: "text", scrollback: 5 });
      assert.deepEqual(screen.lines.slice(0, 2), ["line one", "line two"]);
      assert.equal(screen.title, "ts-title");
      assert.equal(screen.cols, 80);
      assert.equal(screen.rows, 24);
      assert.equal(screen.cursor_y, 2);
      assert.equal(screen.alternate, false);
      await readUntil(v, () => v.nextOffset >= screen.offset); // the output the screen shows, as bytes
      assert.equal(v.nextOffset, screen.offset); // every byte before it, none after
    });
    await connected(info.socket, { role: "viewer", rendered: 10 }, async (v) => {
      assert.equal(v.replay.data.length, 0);
      assert.equal(v.replay.offset, v.welcome.ring_end);
      assert.match(Buffer.from(v.replay.preamble).toString(), /line one[^]*line two/);
    });
    // a terminal gives its size: the session takes it before the drawing (a viewer never resizes)
    await connected(info.socket, { role: "terminal", rendered: 0, size: { cols: 100, rows: 30 } }, async (t) => {
      assert.deepEqual([t.welcome.cols, t.welcome.rows], [100, 30]);
      assert.match(Buffer.from(t.replay.preamble).toString(), /line one[^]*line two/);
    });
    await assert.rejects(connected(info.socket, { role: "terminal", size: { cols: 0, rows: 30 } }, async () => {}), RangeError);
  });
});
