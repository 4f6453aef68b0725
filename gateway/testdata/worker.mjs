// A worqr worker in 59 lines of Node (>= 18): plain fetch against the
// gateway's Connect JSON API. Env: GATEWAY (http://host:port), QUEUE, NAME,
// TOKEN (optional), WORK_MS (how long each task takes).
const { GATEWAY, QUEUE = "jobs", NAME = "node", TOKEN, WORK_MS = "100" } = process.env;
const log = (line) => process.stdout.write(line + "\n");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function call(method, body) {
  const res = await fetch(`${GATEWAY}/worqr.gateway.v1.GatewayService/${method}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...(TOKEN && { Authorization: `Bearer ${TOKEN}` }) },
    body: JSON.stringify(body),
  });
  const out = await res.json().catch(() => ({ code: "unavailable", message: res.statusText })); // a proxy's page
  if (!res.ok) throw Object.assign(new Error(out.message), { code: out.code, status: res.status });
  return out;
}

let session = null;
const running = new Set(); // the pids this worker runs: each beat lists them
async function open() { // until one opens: the gateway or its Redis may be away for a while
  for (let delay = 200; ; delay = Math.min(2 * delay, 5000)) {
    try { session = await call("OpenSession", { name: NAME, queues: [QUEUE] }); break; }
    catch (e) { log(`open failed ${e.code ?? e.message}`); await sleep(delay); }
  }
  log(`session ${session.sessionId}`);
}
async function beatLoop() { // a taking the worker never saw (a Take whose reply was lost) is given back
  for (;;) {
    await sleep(session.beatMs);
    try { await call("Beat", { sessionId: session.sessionId, checkRunning: true, running: [...running] }); }
    catch (e) { if (e.code === "failed_precondition") await open(); } // session lost: start over
  }
}

await open();
beatLoop();
for (;;) {
  const sid = session.sessionId;
  let takings = [];
  try { ({ takings } = await call("Take", { sessionId: sid, queue: QUEUE, max: 1, waitMs: 5000 })); }
  catch (e) { await sleep(100); continue; }
  for (const t of takings) {
    running.add(t.pid);
    const text = (b) => Buffer.from(b, "base64").toString(); // every field comes, "" and [] included
    log(`took ${t.taskId} ${t.pid} ${JSON.stringify({ payload: text(t.payload), key: t.key, merged: t.payloads.map((p) => text(p.data)),
      type: t.type, traceparent: t.traceparent })}`);
    await sleep(Number(WORK_MS)); // the work
    const result = Buffer.from(NAME).toString("base64");
    for (let attempt = 1; ; attempt++) { // a repeat after a lost reply answers the same
      try {
        const { outcome } = await call("Finish", { sessionId: sid, pid: t.pid, result });
        log(`finished ${t.taskId} ${t.pid} ${outcome}`);
      } catch (e) {
        if (e.code !== "failed_precondition" && attempt < 20) { await sleep(200); continue; }
        log(`refused ${t.taskId} ${t.pid} ${e.code} ${e.status}`);
      }
      break;
    }
    running.delete(t.pid);
  }
}
