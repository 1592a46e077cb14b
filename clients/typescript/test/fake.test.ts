// The client against a fake shellper, for what a real one never does: an oversized DATA frame.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { Client, ProtocolViolation, ResumingClient, SessionGone, encodeFrame } from "../src/index.js";

const WELCOME = {
  type: "WELCOME", version: 2, name: "fake", shellper_pid: 1, shellper_start_time: 1, boot_id: "b", instance_id: "i",
  state: "running", cols: 80, rows: 24, ring_start: 0n, ring_end: 2n,
} as const;

test("an oversized DATA frame ends the connection with SessionGone, so that a resume fetches what it held", { timeout: 10_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "shellper-ts-fake-"));
  const path = join(dir, "fake.sock");
  const server = net.createServer((socket) => {
    socket.once("data", () => {
      const header = Buffer.from([0x01, 0, 0, 0, 0]);
      header.writeUInt32BE(1024 + 1, 1);
      socket.end(Buffer.concat([
        encodeFrame(WELCOME), encodeFrame({ type: "REPLAY", offset: 0n, data: Buffer.from("ab") }),
        header, Buffer.alloc(1024 + 1), encodeFrame({ type: "DATA", data: Buffer.from("cd") }),
      ]));
    });
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  try {
    const c = await Client.connect(path, { maxFrame: 1024 });
    assert.equal(c.nextOffset, 2n);
    await assert.rejects(c.recv(5000), (e: unknown) => e instanceof SessionGone && /oversized DATA/.test(e.message));
    assert.equal(c.nextOffset, 2n); // the "cd" after the lost frame was not counted at the wrong offset
    await c.close();
  } finally {
    await new Promise((resolve) => server.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a PING from the peer is answered with a PONG carrying its nonce", { timeout: 10_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "shellper-ts-fake-"));
  const path = join(dir, "fake.sock");
  const PONG = Buffer.from(encodeFrame({ type: "PONG", nonce: 5n })).toString("hex");
  let answered: Promise<Buffer> = Promise.resolve(Buffer.alloc(0));
  const server = net.createServer((socket) => {
    answered = new Promise((resolve) => {
      let got = Buffer.alloc(0);
      socket.on("data", (chunk: Buffer) => {
        got = Buffer.concat([got, chunk]);
        if (got.toString("hex").endsWith(PONG)) resolve(got); // after the HELLO
      });
    });
    socket.once("data", () => {
      socket.write(Buffer.concat([encodeFrame(WELCOME), encodeFrame({ type: "REPLAY", offset: 0n }), encodeFrame({ type: "PING", nonce: 5n })]));
    });
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  try {
    const c = await Client.connect(path);
    const bytes = await answered;
    assert.ok(bytes.toString("hex").endsWith(PONG));
    assert.equal(await c.recv(50), null); // the PING is answered, not handed out
    c.abort();
    await c.closed;
  } finally {
    await new Promise((resolve) => server.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  }
});

test("events after the session's last event are refused, as a current shellper's bad_offset", { timeout: 10_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "shellper-ts-fake-"));
  const path = join(dir, "fake.sock");
  const seqs = [5n, 2n, 5n]; // the first connection's last event, then a reconnection's (older shellpers accepted it)
  let connections = 0;
  const server = net.createServer((socket) => {
    const eventSeq = seqs[connections++ % seqs.length];
    socket.once("data", () => {
      socket.end(Buffer.concat([encodeFrame({ ...WELCOME, event_seq: eventSeq }), encodeFrame({ type: "REPLAY", offset: 0n })]));
    });
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  try {
    const rc = await ResumingClient.connect(path, { eventsAfter: 5n, backoff: { initialMs: 1, factor: 1, maxMs: 1, maxAttempts: 3 } });
    await assert.rejects((async () => { for await (const _ of rc) { /* until the stream ends */ } })(),
      (e: unknown) => e instanceof ProtocolViolation && /events after 5, the session's last event is 2/.test(e.message));
    await rc.close();
    connections = 1; // the next one says 2: refused at the first connection too
    await assert.rejects(ResumingClient.connect(path, { eventsAfter: 5n }),
      (e: unknown) => e instanceof ProtocolViolation && /events after 5/.test(e.message));
  } finally {
    await new Promise((resolve) => server.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  }
});
