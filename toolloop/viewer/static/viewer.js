// toolloop's live run viewer: reads the runs' typed events as Server-Sent Events from
// /events and draws each run: its rounds, the plan streaming, the tool calls as bars on a
// shared time axis, the records with their results and errors, the short-circuit, usage.
// Plain JavaScript, no dependency, no build step. Text from events is always set as text.
"use strict";

const runs = new Map(); // execution_id -> run
let pendingMeta = null; // a trace header's meta, for the next run that shows up
const dirty = new Set();
let frame = 0;

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "style") Object.assign(node.style, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function seconds(value) {
  if (value < 1) return Math.round(value * 1000) + " ms";
  return value.toFixed(value < 10 ? 2 : 1) + " s";
}

function preview(value, limit) {
  let text;
  try {
    text = typeof value === "string" ? value : JSON.stringify(value);
  } catch (error) {
    text = String(value);
  }
  if (text === undefined) text = String(value);
  return text.length > limit ? text.slice(0, limit) + "…" : text;
}

function newRun(id) {
  const run = {
    id, flow: "", meta: pendingMeta, rounds: new Map(), calls: new Map(), lastAt: 0,
    receivedAt: performance.now() / 1000, finished: null, failed: null, usage: {},
    live: true,
  };
  pendingMeta = null;
  runs.set(id, run);
  return run;
}

function roundOf(run, index) {
  let round = run.rounds.get(index);
  if (!round) {
    round = { index, startAt: null, plan: null, finishedAt: null, duration: null };
    run.rounds.set(index, round);
  }
  return round;
}

function addUsage(run, usage) {
  if (!usage || typeof usage !== "object") return;
  for (const [key, value] of Object.entries(usage)) {
    if (typeof value === "number") run.usage[key] = (run.usage[key] || 0) + value;
  }
}

function apply(event) {
  const kind = event.kind;
  if (kind === "trace_header") {
    pendingMeta = event.meta || null;
    return;
  }
  if (kind === "viewer_note") {
    document.getElementById("notes").append(h("div", { class: "note" }, event.text));
    return;
  }
  const id = event.execution_id;
  if (typeof id !== "string") return;
  const run = runs.get(id) || newRun(id);
  if (typeof event.at === "number" && event.at >= run.lastAt) {
    run.lastAt = event.at;
    run.receivedAt = performance.now() / 1000;
  }
  // each plan and model call carries its own usage; the end of a run carries the run's
  // total again, which would count it twice
  // every model call of a run (a plan's, an agent's, the final answer) tells its own usage;
  // plans and the end of a run repeat it in sums, which would count it twice
  if (kind === "model_call_finished") addUsage(run, event.usage);
  if (kind === "run_meta") {
    run.meta = event.meta;
  } else if (kind === "execution_started") {
    run.flow = event.flow || "";
  } else if (kind === "round_started") {
    roundOf(run, event.round_index).startAt = event.at;
  } else if (kind === "plan_decided") {
    const round = roundOf(run, event.round_index);
    round.plan = event;
    if (round.startAt === null) round.startAt = event.at - (event.duration || 0);
  } else if (kind === "tool_call_started") {
    roundOf(run, event.round_index);
    const call = run.calls.get(event.call_id) || {};
    Object.assign(call, {
      id: event.call_id, round: event.round_index, index: event.index,
      command: event.command || {}, startAt: event.at, endAt: null, record: null,
    });
    run.calls.set(event.call_id, call);
  } else if (kind === "tool_call_finished") {
    roundOf(run, event.round_index);
    const call = run.calls.get(event.call_id) || {
      id: event.call_id, round: event.round_index, index: event.index,
      command: {}, startAt: event.at - (event.duration || 0),
    };
    call.endAt = event.at;
    call.record = event.record || {};
    call.duration = event.duration;
    run.calls.set(event.call_id, call);
  } else if (kind === "round_finished") {
    const round = roundOf(run, event.round_index);
    round.finishedAt = event.at;
    round.duration = event.duration;
  } else if (kind === "run_finished") {
    run.finished = event;
  } else if (kind === "execution_finished") {
    run.live = false;
  } else if (kind === "execution_failed") {
    run.failed = event.error || "failed";
    run.live = false;
  }
  dirty.add(id);
}

function runNow(run) {
  // where "now" is on the run's own clock: the last event's time, plus the time since
  if (!run.live || run.finished || run.failed) return run.lastAt;
  return run.lastAt + (performance.now() / 1000 - run.receivedAt);
}

function isRunning(run) {
  return run.live && !run.finished && !run.failed;
}

function callState(call) {
  if (!call.record) return "running";
  return call.record.success ? "ok" : "failed";
}

function bar(cls, start, end, span, label, attrs) {
  const left = (100 * start) / span;
  const width = Math.max((100 * (end - start)) / span, 0);
  return h("div", { class: "bar " + cls, style: { left: left + "%", width: width + "%" },
    title: label, ...attrs }, label);
}

function drawTimeline(run) {
  const now = runNow(run);
  let end = Math.max(now, 0.001);
  for (const call of run.calls.values()) end = Math.max(end, call.endAt || 0);
  const span = end * 1.04;
  const axis = h("div", { class: "axis" });
  for (const [t, label] of axisTicks(span)) {
    axis.append(h("span", { style: { left: (100 * t) / span + "%" } }, label));
  }
  const rows = [axis];
  const rounds = [...run.rounds.values()].sort((a, b) => a.index - b.index);
  for (const round of rounds) {
    const track = h("div", { class: "track" });
    if (round.startAt !== null) {
      const planning = !round.plan;
      const planEnd = planning ? now : round.plan.at;
      const cut = round.plan && round.plan.short_circuited;
      const label = planning ? "planning…"
        : "plan: " + round.plan.next_action + (cut ? " · short-circuit" : "");
      track.append(bar("plan", round.startAt, planEnd, span, label,
        { "data-round": round.index, "data-state": planning ? "planning" : "decided" }));
      if (cut) {
        track.append(h("span", { class: "short-circuit", "data-round": round.index,
          title: "short-circuit: the planner hung up once the answer was settled",
          style: { left: (100 * planEnd) / span + "%" } }, "⚡"));
      }
    }
    rows.push(h("div", { class: "row round-row", "data-round": round.index },
      h("span", { class: "label" }, "round " + round.index), track));
    const calls = [...run.calls.values()].filter((c) => c.round === round.index)
      .sort((a, b) => a.index - b.index);
    for (const call of calls) {
      const state = callState(call);
      const name = (call.record && call.record.tool_name) || call.command.tool_name || "?";
      const stop = call.endAt !== null && call.endAt !== undefined ? call.endAt : now;
      const took = seconds(Math.max(stop - call.startAt, 0));
      rows.push(h("div", { class: "row call-row" },
        h("span", { class: "label", title: name }, "#" + call.index + " " + name),
        h("div", { class: "track" }, bar("call", call.startAt, stop, span, name + " · " + took,
          { "data-state": state, "data-tool": name, "data-round": call.round,
            "data-call-id": call.id }))));
    }
  }
  return h("div", { class: "timeline" }, rows);
}

function niceStep(raw) {
  const power = Math.pow(10, Math.floor(Math.log10(raw || 0.001)));
  for (const m of [1, 2, 5, 10]) if (raw <= m * power) return m * power;
  return 10 * power;
}

// The ticks of an axis of `span` seconds: [seconds, label] about every eighth of it, at a
// round step, labelled in one unit (ms up to a second, s past it) with the decimals the
// step needs ("0.2 ms", "1.5 s"): no two ticks read the same, at any scale.
function axisTicks(span) {
  const step = niceStep(span / 8);
  const [unit, factor] = span <= 1 ? ["ms", 1000] : ["s", 1];
  const decimals = Math.max(0, -Math.floor(Math.log10(step * factor) + 1e-9));
  const ticks = [];
  for (let i = 0; i * step <= span * 0.93; i++) {
    const t = i * step;
    ticks.push([t, i === 0 ? "0 " + unit : (t * factor).toFixed(decimals) + " " + unit]);
  }
  return ticks;
}

function drawRounds(run) {
  const rounds = [...run.rounds.values()].sort((a, b) => a.index - b.index);
  return h("div", { class: "rounds" }, rounds.map((round) => {
    const plan = round.plan;
    let planLine = "planning…";
    if (plan) {
      const commands = (plan.commands || []).length;
      planLine = "plan: " + plan.next_action +
        (commands ? `, ${commands} command${commands === 1 ? "" : "s"}` : "") +
        ` (${seconds(plan.duration || 0)})` +
        (plan.short_circuited ? " · short-circuited: the planner hung up once the answer was settled" : "") +
        (plan.refusal ? " · the model refused" : "") +
        ((plan.notes || []).length ? " · " + plan.notes.join("; ") : "");
    }
    // a thinking model's reasoning, folded: it can be long
    const reasoning = plan && plan.reasoning
      ? h("details", { class: "reasoning" }, h("summary", {}, "reasoning"),
        h("pre", {}, preview(plan.reasoning, 4000)))
      : null;
    const calls = [...run.calls.values()].filter((c) => c.round === round.index)
      .sort((a, b) => a.index - b.index);
    return h("section", { class: "round", "data-round": round.index },
      h("h3", {}, "round " + round.index + (round.duration === null ? ""
        : round.startAt === null ? ` · tools ${seconds(round.duration)}`
          : ` · ${seconds(round.finishedAt - round.startAt)} in all, tools ` +
            seconds(round.duration))),
      h("div", { class: "plan-line" }, planLine),
      reasoning,
      calls.length ? h("ol", { class: "records" }, calls.map((call) => {
        const state = callState(call);
        const record = call.record || {};
        const name = record.tool_name || call.command.tool_name || "?";
        const purpose = record.purpose || call.command.purpose || "";
        const body = state === "running"
          ? h("pre", { class: "args" }, preview(call.command.tool_kwargs || {}, 400))
          : state === "ok"
            ? h("pre", { class: "result" }, preview(record.result, 1200))
            : h("div", { class: "error" }, record.error || "failed");
        return h("li", { class: "record " + state, "data-tool": name, "data-call-id": call.id },
          h("span", { class: "tool" }, "#" + call.index + " " + name), " ",
          h("span", { class: "purpose" }, purpose), " ",
          h("span", { class: "took" }, call.duration !== undefined ? seconds(call.duration) : ""),
          body);
      })) : null);
  }));
}

function drawRun(run) {
  const state = run.failed ? "failed" : run.finished ? "finished" : isRunning(run) ? "running" : "finished";
  const words = run.failed ? "failed" : run.finished ? "finished: " + run.finished.stop_reason
    : isRunning(run) ? "running" : "ended";
  const meta = run.meta && typeof run.meta === "object"
    ? Object.entries(run.meta).map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`).join(" · ")
    : "";
  const usage = Object.entries(run.usage);
  let finished = null;
  if (run.finished) {
    const f = run.finished;
    finished = h("div", { class: "finished-line" },
      `${f.stop_reason} after ${f.turns} round${f.turns === 1 ? "" : "s"}, ` +
      `${f.records} record${f.records === 1 ? "" : "s"}`);
  } else if (run.failed) {
    finished = h("div", { class: "finished-line failed" }, "failed: " + run.failed);
  }
  return h("article", { class: "run", "data-execution-id": run.id, "data-state": state },
    h("div", { class: "run-head" },
      h("h2", {}, (run.flow || "run") + " "),
      h("span", { class: "badge " + state }, words),
      h("span", { class: "meta" }, meta),
      h("code", { class: "meta" }, run.id.slice(0, 12))),
    usage.length ? h("div", { class: "usage" }, "usage: " +
      usage.map(([k, v]) => `${k} ${v}`).join(" · ")) : null,
    drawTimeline(run), drawRounds(run), finished);
}

function render() {
  frame = 0;
  const main = document.getElementById("runs");
  for (const id of dirty) {
    const run = runs.get(id);
    const node = drawRun(run);
    const old = main.querySelector(`article.run[data-execution-id="${CSS.escape(id)}"]`);
    if (old) old.replaceWith(node);
    else main.prepend(node);
  }
  dirty.clear();
  const empty = document.getElementById("empty");
  if (empty && runs.size) empty.remove();
}

function schedule() {
  if (!frame) frame = requestAnimationFrame(render);
}

// the clocks of running bars move on between events
setInterval(() => {
  for (const run of runs.values()) if (isRunning(run)) dirty.add(run.id);
  if (dirty.size) schedule();
}, 100);

function connect() {
  const status = document.getElementById("status");
  const source = new EventSource("events");
  source.onopen = () => { status.dataset.state = "live"; status.textContent = "live"; };
  source.onmessage = (message) => {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch (error) {
      return;
    }
    apply(event);
    schedule();
  };
  source.addEventListener("closed", () => {
    source.close();
    status.dataset.state = "closed";
    status.textContent = "the viewer stopped: what it showed stays here";
    for (const run of runs.values()) { run.live = false; dirty.add(run.id); }
    schedule();
  });
  source.onerror = () => {
    if (source.readyState !== EventSource.OPEN && status.dataset.state !== "closed") {
      status.dataset.state = "connecting";
      status.textContent = "reconnecting…";
    }
  };
}

connect();
