import { execFileSync } from "node:child_process";
import { ResumingClient } from "@shellper/client";

// Launch a session (its shellper detaches and outlives this process), then supervise it.
const run = ["run", "job", "--json", "--restart", "no", "--", "bash", "--norc"];
const info = JSON.parse(execFileSync("shellper", run, { encoding: "utf8" }));
const session = await ResumingClient.connect(info.socket, { expectInstanceId: info.instance_id });
session.write("echo hello from $SHELLPER_SESSION; exit 3\n");
for await (const item of session) { // one stream across reconnections: nothing lost or repeated
  if (item.type === "DATA") process.stdout.write(item.data);
  else if (item.type === "GAP") console.log(`[${item.missed} bytes lost: the ring moved on]`);
  else if (item.type === "RECONNECTED") console.log(`[resumed at offset ${item.resumedFrom}]`);
  else if (item.type === "EVENT") console.log(`[event ${item.seq}: ${item.kind}]`);
  else if (item.type === "EXIT") {
    console.log(`[${item.reason}: ${item.class}, session ${item.state}]`);
    if (item.state !== "backoff") session.stop(1); // it will not restart: end it
  }
}
console.log(`[session over at offset ${session.nextOffset}]`);
