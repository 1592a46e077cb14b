// Real shellpers for the end-to-end tests: launched with this checkout's `shellper run` in a private
// runtime directory, stopped and verified gone afterwards (a survivor is killed by pid, after its
// command line says it is a shellper of this directory), and the directory removed.

import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, chmodSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { Client, type Frame } from "../src/index.js";

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL("../../../../", import.meta.url));

/** The shellper command: $SHELLPER (the Makefile sets it), else this checkout's .venv. */
export const SHELLPER = process.env.SHELLPER ?? join(ROOT, ".venv", "bin", "shellper");
export const HAVE_SHELLPER = existsSync(SHELLPER);

export interface Launched {
  name: string;
  pid: number;
  child_pid: number | null;
  instance_id: string;
  socket: string;
}

export function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

/** Polls `check` until it holds or `timeoutMs` passes (for what gives no event: a pid's end). */
export async function pollUntil(check: () => boolean | Promise<boolean>, timeoutMs = 10_000, what = "condition"): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 5; !(await check()); delay = Math.min(delay * 2, 100)) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, delay));
  }
}

export class Sessions {
  readonly dir = mkdtempSync(join(tmpdir(), "shellper-ts-"));
  private readonly launched: Launched[] = [];

  constructor() {
    chmodSync(this.dir, 0o700);
  }

  async launch(name: string, argv: string[], options: string[] = []): Promise<Launched> {
    const { stdout } = await run(SHELLPER, ["run", name, "--dir", this.dir, "--json", "--containment", "none", ...options, "--", ...argv]);
    const info = JSON.parse(stdout) as Launched;
    this.launched.push(info);
    return info;
  }

  /** Stops every session still running and checks that none survives, then removes the directory. */
  async cleanup(): Promise<void> {
    for (const info of this.launched) {
      if (alive(info.pid)) await run(SHELLPER, ["stop", info.name, "--dir", this.dir, "--grace", "1"]).catch(() => undefined);
      await pollUntil(() => !alive(info.pid), 10_000, `shellper ${info.pid} to end`).catch(() => {
        const cmdline = readFileSync(`/proc/${info.pid}/cmdline`, "utf8");
        if (cmdline.includes("shellper")) process.kill(info.pid, "SIGKILL");
        throw new Error(`shellper ${info.pid} (${info.name}) outlived its stop and was killed`);
      });
    }
    // The directory goes first: its warm launcher (`shellper.daemon.launcher DIR`, started by the first launch)
    // lives until its directory is removed, and then exits on its own, removing its cgroup.
    rmSync(this.dir, { recursive: true, force: true });
    await pollUntil(() => this.survivors().length === 0, 10_000, "every process of this directory to end").catch(() => {
      throw new Error(`processes of ${this.dir} outlived the test: ${this.survivors().join(", ")}`);
    });
  }

  /** Live processes that name this directory in their command line or environment (a shellper
   * launched by a program under test, and the children of any). */
  survivors(): number[] {
    const found: number[] = [];
    for (const entry of readdirSync("/proc")) {
      const pid = Number(entry);
      if (!Number.isInteger(pid) || pid === process.pid) continue;
      try {
        const named = readFileSync(`/proc/${pid}/cmdline`, "latin1").includes(this.dir)
          || readFileSync(`/proc/${pid}/environ`, "latin1").split("\0").includes(`SHELLPER_DIR=${this.dir}`);
        if (named && alive(pid)) found.push(pid);
      } catch {
        // gone meanwhile, or not ours to read
      }
    }
    return found;
  }
}

/** Frames from `client` until `done(frames, output)` holds; fails after `timeoutMs`. */
export async function readUntil(
  client: { recv(timeoutMs?: number): Promise<Frame | { type: string } | null> },
  done: (frames: { type: string }[], output: string) => boolean,
  timeoutMs = 10_000,
): Promise<{ frames: { type: string }[]; output: string }> {
  const frames: { type: string }[] = [];
  const chunks: Buffer[] = [];
  const deadline = Date.now() + timeoutMs;
  let output = "";
  while (!done(frames, output)) {
    const left = deadline - Date.now();
    if (left <= 0) throw new Error(`timed out; got ${frames.map((f) => f.type).join(" ")}; output ${JSON.stringify(output.slice(-300))}`);
    const frame = await client.recv(left);
    if (frame === null) continue;
    frames.push(frame);
    if (frame.type === "DATA") {
      chunks.push(Buffer.from((frame as { data: Uint8Array }).data));
      output = Buffer.concat(chunks).toString("latin1");
    }
  }
  return { frames, output };
}

/** Everything a Client connected with `connect` receives: a fresh connection per call. */
export async function connected<T>(socket: string, options: Parameters<typeof Client.connect>[1], use: (c: Client) => Promise<T>): Promise<T> {
  const client = await Client.connect(socket, options);
  try {
    return await use(client);
  } finally {
    await client.close();
  }
}
