// toolloop's live run viewer: reads the runs' typed events as Server-Sent Events from
// /events and draws each run, whatever product made it: its model calls and tool calls as
// bars on a shared time axis, the records with their results and errors, the statuses, a
// pause for a human (what it asks) and the resume, the stop reason, the usage; the loop's
// rounds add their plans (streaming, the short-circuit).
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
    id, flow: "", meta: pendingMeta, rounds: new Map(), calls: new Map(), models: new Map(),
    statuses: [], pauses: [], resumes: [], offset: 0, started: false, lastAt: 0,
    retries: [], limits: new Map(), kept: new Map(),
    receivedAt: performance.now() / 1000, finished: null, failed: null, paused: false,
    usage: {}, live: true,
  };
  pendingMeta = null;
  runs.set(id, run);
  return run;
}

function roundOf(run, index) {
  let round = run.rounds.get(index);
  if (!round) {
    round = { index, startAt: null, plan: null, finishedAt: null, duration: null, planned: false };
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

// A model call's try is known by the call's index and the try's number (a retried call has
// several, each a bar of its own).
function modelKey(event) {
  return event.call_index + "/" + (event.attempt || 1);
}

// A tool call is known by its turn and its id: a provider may use one id in every turn.
function callKey(event) {
  return event.round_index + "/" + event.call_id;
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
  if (kind === "child_run_event") {
    // a run called as a tool: a run of its own, on its parent's clock, drawn under the
    // parent's call (a grandchild's come flat too, each naming its own parent)
    const inner = event.event;
    if (!inner || typeof inner !== "object" || typeof event.run_id !== "string") return;
    const child = runs.get(event.run_id) || newRun(event.run_id);
    child.parent = { run: event.parent_run_id, call: event.call_id, top: id };
    apply({ ...inner, execution_id: event.run_id, at: event.at });
    dirty.add(id);
    return;
  }
  const run = runs.get(id) || newRun(id);
  if (kind === "execution_started" && run.started) {
    // a resume (or a recovery): its clock may start again at 0; lay it after the pause
    const pause = run.pauses[run.pauses.length - 1];
    const from = pause ? pause.at : run.lastAt;
    if (typeof event.at === "number" && event.at + run.offset < from) {
      run.offset = from - event.at;
    }
  }
  const at = typeof event.at === "number" ? event.at + run.offset : run.lastAt;
  if (at >= run.lastAt) {
    run.lastAt = at;
    run.receivedAt = performance.now() / 1000;
  }
  // every model call of a run (a plan's, an agent's, a status step's, the final answer)
  // tells its own usage; plans repeat it in sums, which would count it twice, and the
  // end of a run tells the total (shown instead, since it counts across resumes)
  if (kind === "model_call_finished") addUsage(run, event.usage);
  if (kind === "run_meta") {
    run.meta = event.meta;
  } else if (kind === "execution_started") {
    if (run.started) {
      run.resumes.push(at);
      const pause = run.pauses[run.pauses.length - 1];
      if (pause && pause.resumedAt === null) pause.resumedAt = at;
    }
    run.started = true;
    run.flow = event.flow || run.flow;
    run.paused = false;
    run.live = true;
  } else if (kind === "round_started") {
    const round = roundOf(run, event.round_index);
    round.startAt = at;
    round.plan = null;
    round.planned = true;
  } else if (kind === "plan_decided") {
    const round = roundOf(run, event.round_index);
    round.plan = { ...event, at };
    round.planned = true;
    if (round.startAt === null) round.startAt = at - (event.duration || 0);
  } else if (kind === "model_call_started") {
    run.models.set(modelKey(event), { key: modelKey(event), index: event.call_index,
      attempt: event.attempt || 1, startAt: at, endAt: null, event: null });
  } else if (kind === "model_call_finished") {
    const model = run.models.get(modelKey(event)) ||
      { key: modelKey(event), index: event.call_index, attempt: event.attempt || 1,
        startAt: at - (event.duration || 0) };
    model.endAt = at;
    model.event = event;
    run.models.set(modelKey(event), model);
  } else if (kind === "retry_scheduled") {
    run.retries.push({ ...event, at });
  } else if (kind === "rate_limit_changed") {
    run.limits.set(event.name || "", { ...event, at });
  } else if (kind === "result_kept") {
    run.kept.set(event.call_id, event);  // a result cut for the model, kept whole
  } else if (kind === "tool_call_started") {
    roundOf(run, event.round_index);
    const key = callKey(event);
    const call = run.calls.get(key) || {};
    Object.assign(call, {
      id: event.call_id, round: event.round_index, index: event.index,
      command: event.command || {}, startAt: at, endAt: null, record: null, progress: null,
    });
    run.calls.set(key, call);
  } else if (kind === "tool_call_finished") {
    roundOf(run, event.round_index);
    const key = callKey(event);
    const call = run.calls.get(key) || {
      id: event.call_id, round: event.round_index, index: event.index,
      command: {}, startAt: at - (event.duration || 0), progress: null,
    };
    call.endAt = at;
    call.record = event.record || {};
    call.duration = event.duration;
    call.source = event.source;
    run.calls.set(key, call);
  } else if (kind === "tool_progress") {
    const call = run.calls.get(callKey(event));  // the call that reports, by its id
    if (call && !call.record) call.progress = event.message;
  } else if (kind === "status_changed") {
    run.statuses.push({ at, node: event.node, status: event.status });
  } else if (kind === "round_finished") {
    const round = roundOf(run, event.round_index);
    round.finishedAt = at;
    round.duration = event.duration;
  } else if (kind === "run_finished") {
    run.finished = event;
    run.paused = false;
  } else if (kind === "execution_paused") {
    run.paused = true;
    run.live = false;
    run.pauses.push({ at, waiting_for: event.waiting_for || [], requests: event.requests || [],
      resumedAt: null });
  } else if (kind === "execution_finished") {
    run.live = false;
  } else if (kind === "execution_failed") {
    run.failed = event.error || "failed";
    run.live = false;
  }
  dirty.add(id);
}

function runNow(run) {
  // where "now" is on the run's own clock: the last event's time, plus the time since; a
  // paused run's clock stands still
  if (!isRunning(run)) return run.lastAt;
  return run.lastAt + (performance.now() / 1000 - run.receivedAt);
}

function isRunning(run) {
  return run.live && !run.finished && !run.failed && !run.paused;
}

function callState(call) {
  if (!call.record) return "running";
  return call.record.success ? "ok" : "failed";
}

function modelState(model) {
  if (!model.event) return "running";
  if (model.event.error) return "failed";
  if (model.event.closed_early) return "cut";
  return "ok";
}

function tokens(usage) {
  if (!usage || typeof usage !== "object") return "";
  const parts = [];
  if (typeof usage.input_tokens === "number") parts.push(usage.input_tokens + " in");
  if (typeof usage.output_tokens === "number") parts.push(usage.output_tokens + " out");
  return parts.length ? parts.join(" / ") + " tokens" : "";
}

function modelSaid(model) {
  const event = model.event;
  if (!event) return "calling…";
  if (event.error) return "failed: " + event.error;
  const calls = event.tool_calls || [];
  let said;
  if (calls.length) {
    said = `→ ${calls.length} tool call${calls.length === 1 ? "" : "s"}: ` +
      calls.map((c) => c.name).join(", ");
  } else if (event.text) {
    said = "→ " + preview(event.text, 60);
  } else {
    said = "→ " + (event.finish_reason || "nothing");
  }
  if (event.closed_early) said += " · closed early";
  if (event.refusal) said += " · the model refused";
  return said;
}

// what a pause asks, in a few words: each request's kind and the tools it names
function asked(pause) {
  const said = (pause.requests || []).map((request) => {
    if (!request || typeof request !== "object") return String(request);
    const names = (request.tool_calls || []).map((c) => c.tool_name);
    return (request.kind || "request") + (names.length ? " (" + names.join(", ") + ")" : "");
  });
  return said.join("; ") || (pause.waiting_for || []).join(", ") || "a human";
}

// the rows of a run's model calls made while a round of the loop was being planned
function modelsOf(run, round) {
  if (!round.planned || round.startAt === null) return [];
  const end = round.plan ? round.plan.at : Infinity;
  return [...run.models.values()].filter((m) => m.startAt >= round.startAt && m.startAt <= end);
}

function bar(cls, start, end, span, label, attrs) {
  const left = (100 * start) / span;
  const width = Math.max((100 * (end - start)) / span, 0);
  return h("div", { class: "bar " + cls, style: { left: left + "%", width: width + "%" },
    title: label, ...attrs }, label);
}

function modelName(model) {
  return "model call #" + model.index + (model.attempt > 1 ? " (try " + model.attempt + ")" : "");
}

function modelRow(run, model, span, now) {
  const state = modelState(model);
  const stop = model.endAt !== null && model.endAt !== undefined ? model.endAt : now;
  const usage = model.event ? tokens(model.event.usage) : "";
  const label = [modelSaid(model), usage, seconds(Math.max(stop - model.startAt, 0))]
    .filter(Boolean).join(" · ");
  return h("div", { class: "row model-row" },
    h("span", { class: "label" }, modelName(model)),
    h("div", { class: "track" }, bar("model", model.startAt, stop, span, label,
      { "data-state": state, "data-call-index": model.index, "data-attempt": model.attempt })));
}

function callRow(call, span, now) {
  const state = callState(call);
  const name = (call.record && call.record.tool_name) || call.command.tool_name || "?";
  const stop = call.endAt !== null && call.endAt !== undefined ? call.endAt : now;
  const took = seconds(Math.max(stop - call.startAt, 0));
  const label = name + " · " + took + (call.progress && !call.record ? " · " + call.progress : "");
  return h("div", { class: "row call-row" },
    h("span", { class: "label", title: name }, "#" + call.index + " " + name),
    h("div", { class: "track" }, bar("call", call.startAt, stop, span, label,
      { "data-state": state, "data-tool": name, "data-round": call.round,
        "data-call-id": call.id })));
}

// One timeline for every product, from the events every run tells: model calls, the turns'
// tool calls, the statuses, the pauses and resumes; the loop's rounds add their plans.
function drawTimeline(run) {
  const now = runNow(run);
  let end = Math.max(now, 0.001);
  for (const call of run.calls.values()) end = Math.max(end, call.endAt || 0);
  for (const model of run.models.values()) end = Math.max(end, model.endAt || 0);
  const span = end * 1.04;
  const axis = h("div", { class: "axis" });
  for (const [t, label] of axisTicks(span)) {
    axis.append(h("span", { style: { left: (100 * t) / span + "%" } }, label));
  }
  const rows = [axis];
  if (run.statuses.length) {
    const track = h("div", { class: "track" });
    run.statuses.forEach((mark, n) => {
      const next = n + 1 < run.statuses.length ? run.statuses[n + 1].at : now;
      track.append(bar("status" + (n % 2 ? " odd" : ""), mark.at, Math.max(next, mark.at), span,
        mark.status, { "data-status": mark.status, "data-node": mark.node,
          title: `${mark.node} → ${mark.status} at ${seconds(mark.at)}` }));
    });
    rows.push(h("div", { class: "row status-row" }, h("span", { class: "label" }, "status"), track));
  }
  if (run.pauses.length || run.resumes.length) {
    const track = h("div", { class: "track" });
    for (const pause of run.pauses) {
      track.append(h("span", { class: "pause-mark", title: "paused: waiting for a human · " + asked(pause),
        "data-state": pause.resumedAt === null ? "waiting" : "resumed",
        style: { left: (100 * pause.at) / span + "%" } }, "paused"));
    }
    for (const at of run.resumes) {
      track.append(h("span", { class: "resume-mark", style: { left: (100 * at) / span + "%" } },
        "resumed"));
    }
    rows.push(h("div", { class: "row pause-row" }, h("span", { class: "label" }, "human"), track));
  }
  // blocks in the order they started: a turn (its calls; a loop round its plan first, and
  // the plan's model calls), or a model call of its own
  const inRounds = new Set();
  const blocks = [];
  for (const round of run.rounds.values()) {
    for (const model of modelsOf(run, round)) inRounds.add(model.key);
    const calls = [...run.calls.values()].filter((c) => c.round === round.index);
    const start = round.planned && round.startAt !== null ? round.startAt
      : Math.min(...calls.map((c) => c.startAt), Infinity);
    blocks.push({ start, order: 1, round, calls });
  }
  for (const model of run.models.values()) {
    if (!inRounds.has(model.key)) blocks.push({ start: model.startAt, order: 0, model });
  }
  blocks.sort((a, b) => a.start - b.start || a.order - b.order);
  for (const block of blocks) {
    if (block.model) {
      rows.push(modelRow(run, block.model, span, now));
      continue;
    }
    const round = block.round;
    const track = h("div", { class: "track" });
    if (round.planned && round.startAt !== null) {
      const planning = !round.plan;
      const pause = run.pauses.find((p) => p.at >= round.startAt);
      const waiting = planning && pause;
      const planEnd = planning ? (waiting ? pause.at : now) : round.plan.at;
      const cut = round.plan && round.plan.short_circuited;
      const label = waiting ? "paused: waiting for a human"
        : planning ? "planning…"
          : "plan: " + round.plan.next_action + (cut ? " · short-circuit" : "");
      track.append(bar("plan", round.startAt, planEnd, span, label,
        { "data-round": round.index,
          "data-state": waiting ? "paused" : planning ? "planning" : "decided" }));
      if (cut) {
        track.append(h("span", { class: "short-circuit", "data-round": round.index,
          title: "short-circuit: the planner hung up once the answer was settled",
          style: { left: (100 * planEnd) / span + "%" } }, "⚡"));
      }
    }
    const word = round.planned ? "round " : "turn ";
    rows.push(h("div", { class: "row round-row", "data-round": round.index },
      h("span", { class: "label" }, word + round.index), track));
    for (const model of modelsOf(run, round)) rows.push(modelRow(run, model, span, now));
    for (const call of block.calls.sort((a, b) => a.index - b.index)) {
      rows.push(callRow(call, span, now));
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
    let planLine = null;
    if (round.planned) {
      planLine = "planning…";
      if (plan) {
        const commands = (plan.commands || []).length;
        planLine = "plan: " + plan.next_action +
          (commands ? `, ${commands} command${commands === 1 ? "" : "s"}` : "") +
          ` (${seconds(plan.duration || 0)})` +
          (plan.short_circuited ? " · short-circuited: the planner hung up once the answer was settled" : "") +
          (plan.refusal ? " · the model refused" : "") +
          ((plan.notes || []).length ? " · " + plan.notes.join("; ") : "");
      } else if (run.pauses.some((p) => p.at >= round.startAt)) {
        planLine = "paused: waiting for a human";
      }
    }
    // a thinking model's reasoning, folded: it can be long
    const reasoning = plan && plan.reasoning
      ? h("details", { class: "reasoning" }, h("summary", {}, "reasoning"),
        h("pre", {}, preview(plan.reasoning, 4000)))
      : null;
    const calls = [...run.calls.values()].filter((c) => c.round === round.index)
      .sort((a, b) => a.index - b.index);
    const word = round.planned ? "round " : "turn ";
    return h("section", { class: "round", "data-round": round.index },
      h("h3", {}, word + round.index + (round.duration === null ? ""
        : round.startAt === null ? ` · tools ${seconds(round.duration)}`
          : ` · ${seconds(round.finishedAt - round.startAt)} in all, tools ` +
            seconds(round.duration))),
      planLine === null ? null : h("div", { class: "plan-line" }, planLine),
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
        return h("li", { class: "record " + state, "data-tool": name, "data-call-id": call.id,
          "data-round": call.round },
          h("span", { class: "tool" }, "#" + call.index + " " + name), " ",
          h("span", { class: "purpose" }, purpose), " ",
          h("span", { class: "took" }, call.duration !== undefined ? seconds(call.duration) : ""),
          call.source && call.source !== "ran" ? h("span", { class: "source" }, " · " + call.source) : null,
          call.progress ? h("div", { class: "progress" }, call.progress) : null,
          keptLine(run.kept.get(call.id)),
          body, drawChildren(run, call));
      })) : null);
  }));
}

// a result longer than the run's max_result_chars: what the model was shown of it, and
// the handle read_result reads the rest by
function keptLine(kept) {
  if (!kept) return null;
  const n = (value) => Number(value).toLocaleString("en-US");
  return h("div", { class: "kept", "data-handle": kept.handle },
    `cut for the model: shown ${n(kept.shown)} of ${n(kept.total)} chars, kept whole · ` +
    `handle ${kept.handle}`);
}

// The runs a call started (a run as a tool), each drawn whole under the call.
function drawChildren(run, call) {
  const children = [...runs.values()].filter((c) => c.parent && c.parent.run === run.id &&
    c.parent.call === call.id);
  return children.length ? h("div", { class: "child-runs" }, children.map(drawRun)) : null;
}

function drawModels(run) {
  const models = [...run.models.values()]
    .sort((a, b) => a.index - b.index || a.attempt - b.attempt);
  if (!models.length) return null;
  return h("details", { class: "models", open: models.length <= 12 },
    h("summary", {}, `${models.length} model call${models.length === 1 ? "" : "s"}`),
    h("ol", { class: "model-calls" }, models.map((model) => {
      const event = model.event || {};
      const took = model.endAt !== null && model.endAt !== undefined
        ? seconds(Math.max(model.endAt - model.startAt, 0)) : "";
      return h("li", { class: "model-call " + modelState(model), "data-call-index": model.index,
        "data-attempt": model.attempt },
        h("span", { class: "tool" }, modelName(model)), " ",
        h("span", { class: "said" }, modelSaid(model)), " ",
        h("span", { class: "tokens" }, tokens(event.usage)), " ",
        h("span", { class: "took" }, took));
    })));
}

function drawPauses(run) {
  if (!run.pauses.length) return null;
  return h("div", { class: "pauses" }, run.pauses.map((pause) => {
    const waiting = pause.resumedAt === null;
    const requests = (pause.requests || []).map((request) => {
      if (!request || typeof request !== "object") return h("li", {}, preview(request, 400));
      const calls = (request.tool_calls || []).map((c) =>
        h("li", { class: "asked-call" }, `${c.tool_name} ${preview(c.arguments || {}, 300)}`,
          c.why ? h("span", { class: "purpose" }, " · " + c.why) : null));
      return h("li", { class: "request", "data-kind": request.kind || "" },
        h("span", { class: "tool" }, request.kind || "request"), " ",
        h("span", {}, request.reason || ""),
        (request.allowed || []).length
          ? h("span", { class: "purpose" }, " · answers: " + request.allowed.join(", ")) : null,
        calls.length ? h("ul", {}, calls) : null);
    });
    return h("div", { class: "pause", "data-state": waiting ? "waiting" : "resumed" },
      h("div", { class: "pause-line" },
        (waiting ? "paused: waiting for a human" : "paused, then resumed") +
        ` at ${seconds(pause.at)} · ${asked(pause)}`),
      requests.length ? h("ul", { class: "requests" }, requests) : null);
  }));
}

function drawStatuses(run) {
  if (!run.statuses.length) return null;
  return h("ol", { class: "statuses" }, run.statuses.map((mark, n) =>
    h("li", { class: "status-chip" + (n === run.statuses.length - 1 ? " current" : ""),
      "data-status": mark.status, "data-node": mark.node,
      title: `${mark.node} at ${seconds(mark.at)}` }, mark.status)));
}

// the retries of the run's calls, and each rate limit as its calls last changed it
function drawLimits(run) {
  const lines = [];
  if (run.retries.length) {
    const last = run.retries[run.retries.length - 1];
    const what = last.target === "tool" ? "tool " + last.tool_name : "model call #" + last.call_index;
    lines.push(h("div", { class: "retries", "data-retries": run.retries.length },
      `${run.retries.length} retr${run.retries.length === 1 ? "y" : "ies"} · last: ${what} ` +
      `try ${last.attempt} failed (${preview(last.error || "", 120)}), next in ${seconds(last.wait)}`));
  }
  for (const limit of run.limits.values()) {
    const rate = typeof limit.rate === "number" ? limit.rate.toFixed(1) + "/s" : "no bound";
    const room = typeof limit.concurrency === "number" ? ", " + limit.concurrency + " at once" : "";
    const hold = limit.hold > 0 ? ` · holding ${seconds(limit.hold)}` : "";
    lines.push(h("div", { class: "rate-limit", "data-limit": limit.name, "data-reason": limit.reason },
      `rate limit ${limit.name || ""}: ${limit.reason.replaceAll("_", " ")} → ${rate}${room}` +
      ` · ${limit.in_flight} in flight, ${limit.waiting} waiting · ${limit.refused} refused, ` +
      `${limit.backoffs} back-off${limit.backoffs === 1 ? "" : "s"}${hold}`));
  }
  return lines.length ? h("div", { class: "limits" }, lines) : null;
}

function drawRun(run) {
  const state = run.failed ? "failed" : run.finished ? "finished" : run.paused ? "paused"
    : isRunning(run) ? "running" : "finished";
  const status = run.statuses.length ? run.statuses[run.statuses.length - 1].status : null;
  const words = run.failed ? "failed" : run.finished ? "finished: " + run.finished.stop_reason
    : run.paused ? "paused: waiting for a human" : isRunning(run) ? "running" : "ended";
  const meta = run.meta && typeof run.meta === "object"
    ? Object.entries(run.meta).map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`).join(" · ")
    : "";
  // the end of a run tells its usage across pauses and resumes; until then, the sum of the
  // model calls seen
  const told = run.finished && run.finished.usage && typeof run.finished.usage === "object"
    ? Object.entries(run.finished.usage).filter(([, v]) => typeof v === "number")
    : Object.entries(run.usage);
  const word = [...run.rounds.values()].some((r) => r.planned) ? "round" : "turn";
  let finished = null;
  if (run.finished) {
    const f = run.finished;
    finished = h("div", { class: "finished-line" },
      `${f.stop_reason} after ${f.turns} ${word}${f.turns === 1 ? "" : "s"}, ` +
      `${f.records} record${f.records === 1 ? "" : "s"}`);
  } else if (run.failed) {
    finished = h("div", { class: "finished-line failed" }, "failed: " + run.failed);
  }
  return h("article", { class: "run", "data-execution-id": run.id, "data-state": state },
    h("div", { class: "run-head" },
      h("h2", {}, (run.flow || "run") + " "),
      h("span", { class: "badge " + state }, words),
      status ? h("span", { class: "current-status", "data-status": status }, "status: " + status) : null,
      h("span", { class: "meta" }, meta),
      h("code", { class: "meta run-id" }, run.id)),
    told.length ? h("div", { class: "usage" }, "usage: " +
      told.map(([k, v]) => `${k} ${v}`).join(" · ")) : null,
    drawStatuses(run), drawPauses(run), drawLimits(run),
    drawTimeline(run), drawModels(run), drawRounds(run), finished);
}

function render() {
  frame = 0;
  const main = document.getElementById("runs");
  const tops = new Set();
  for (const id of dirty) {
    const run = runs.get(id);
    if (run) tops.add(run.parent ? run.parent.top : id);  // a child is drawn in its top run
  }
  for (const id of tops) {
    const run = runs.get(id);
    if (!run || run.parent) continue;
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
