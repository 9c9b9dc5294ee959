// The console reads the launch data Telegram put in the URL fragment itself
// (#tgWebAppData=...), so it works without Telegram's script (which only adds the
// theme). Every value is put on the page as text, never as HTML.
"use strict";

function launchData() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const fromFragment = fragment.get("tgWebAppData");
  if (fromFragment) return fromFragment;
  const tg = window.Telegram && window.Telegram.WebApp;
  return tg && tg.initData ? tg.initData : "";
}

const DATA = launchData();

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return node;
}

async function api(path, body) {
  const init = { headers: { Authorization: "tma " + DATA } };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  const answer = await r.json().catch(() => ({}));
  if (!r.ok) {
    const message = answer.error && answer.error.message ? answer.error.message : r.status + "";
    const e = new Error(message);
    // An edit the tool's schema refuses names each field at fault.
    e.fields = answer.error && answer.error.fields ? answer.error.fields : null;
    throw e;
  }
  return answer;
}

function showError(e) {
  const box = document.getElementById("error");
  box.textContent = e.message || String(e);
  box.hidden = false;
}

function field(label, value, pre) {
  if (value === null || value === undefined || value === "") return null;
  return el("div", { class: "field" },
    el("div", { class: "label" }, label),
    pre ? el("pre", {}, value) : el("div", {}, value));
}

// Times and kinds come written as the chat writes them (`2026-12-06 03:02:44 UTC`,
// `approval question`): shown as they are.
function summary(q) {
  return el("div", {},
    el("strong", {}, q.title), " · ", q.agent,
    el("div", { class: "hint" }, "owner " + q.owner_id + " · until " + q.expires_at));
}

async function showList() {
  const main = document.getElementById("main");
  const [{ questions }, { windows }, { grants }, ended, stats] = await Promise.all([
    api("/app/api/questions"), api("/app/api/windows"), api("/app/api/grants"),
    api(ENDED_PAGE), api("/app/api/stats")]);
  main.replaceChildren();
  if (questions.length === 0) {
    main.append(el("p", { class: "hint" }, "Nothing waits for you."));
  }
  for (const q of questions) {
    const card = el("div", { class: "card", "data-id": q.id },
      el("button", { class: "open", onclick: () => showOne(q.id).catch(showError) }, summary(q)));
    main.append(card);
  }
  if (windows.length > 0) main.append(el("h2", {}, "Open windows"));
  for (const w of windows) {
    main.append(el("div", { class: "card", "data-window": w.id },
      el("div", {}, el("strong", {}, w.tool), " · ", w.agent, " · owner ", w.owner_id),
      el("div", { class: "hint" }, "until " + w.expires_at + " · let through " + w.calls + " call(s)" +
        (w.failed > 0 ? ", " + w.failed + " failed" : "")),
      el("button", { onclick: () => revoke("windows", w.id) }, "🔒 Revoke")));
  }
  if (grants.length > 0) main.append(el("h2", {}, "Grants"));
  for (const g of grants) {
    main.append(el("div", { class: "card", "data-grant": g.id },
      el("div", {}, g.agent, " may run ", g.scope, " for ", g.owner_id),
      el("div", { class: "hint" }, "granted by " + g.granted_by + " · until " + g.expires_at),
      el("button", { onclick: () => revoke("grants", g.id) }, "🔒 Revoke")));
  }
  const section = el("section", { id: "ended" }, el("h2", {}, "Recently ended"));
  main.append(section);
  showEnded(section, ended);
  if (ended.questions.length === 0) section.append(el("p", { class: "hint" }, "Nothing has ended yet."));
  main.append(statsSection(stats));
}

// Who decided what and how fast, as /stats says it in the chat.
function statsSection(stats) {
  const section = el("section", { id: "stats" },
    el("h2", {}, "Decisions in the last " + stats.days + " days"));
  for (const r of stats.routes) {
    section.append(el("div", { class: "card", "data-route": r.route },
      el("div", {}, el("strong", {}, "Route " + r.route), ": " + figures(r.total)),
      ...r.people.map((p) => el("div", { class: "field", "data-person": p.name },
        p.name + ": " + p.figures.by_people + " decided" + times(p.figures) + " · " +
        p.figures.approved + " approved, " + p.figures.cancelled + " cancelled" +
        (p.rubber_stamp ? " · ⚠️ approved " + p.figures.approved +
          " and cancelled none, half in under " + span(p.figures.median_seconds) : ""))),
      ...r.tools.map((t) => el("div", { class: "field hint", "data-tool": t.tool },
        t.tool + ": " + figures(t.figures)))));
  }
  return section;
}

function figures(f) {
  if (f.asked === 0) return "no calls ended";
  const parts = [f.asked + " calls, " + f.by_people + " decided by a person" + times(f)];
  for (const [n, what] of [[f.approved, "approved"], [f.cancelled, "cancelled"],
    [f.timed_out, "timed out"], [f.by_rule, "by rules"], [f.by_window, "by windows"],
    [f.by_grant, "by grants"], [f.failed_runs, "failed after a yes"]]) {
    if (n > 0) parts.push(what + " " + n + " (" + Math.round(100 * n / f.asked) + "%)");
  }
  return parts.join(" · ");
}

function times(f) {
  return f.median_seconds == null ? "" :
    " (median " + span(f.median_seconds) + ", 90th percentile " + span(f.p90_seconds) + ")";
}

function span(s) {
  if (s < 10) return s.toFixed(1) + " s";
  if (s < 60) return Math.round(s) + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
}

const ENDED_PAGE = "/app/api/ended?limit=20";

// Appends a page of ended questions to the section, and a More button while the service
// says there is a next page (its cursor is opaque: sent back as it came).
function showEnded(section, page) {
  const more = document.getElementById("more-ended");
  if (more) more.remove();
  for (const q of page.questions) section.append(endedCard(q));
  if (page.next === null || page.next === undefined) return;
  section.append(el("button", {
    id: "more-ended",
    onclick: () => api(ENDED_PAGE + "&before=" + encodeURIComponent(page.next))
      .then((next) => showEnded(section, next)).catch(showError),
  }, "More"));
}

// An ended question: what was asked, how it ended and by whom, when, and what the
// agent reported of running it; tapping it opens it whole.
function endedCard(q) {
  const how = q.status + (q.decided_by ? " by " + q.decided_by : "") +
    (q.decided_at ? " · " + q.decided_at : "");
  return el("div", { class: "card", "data-ended": q.id },
    el("button", { class: "open", onclick: () => showOne(q.id).catch(showError) },
      el("div", {}, el("strong", {}, q.title), " · ", q.agent),
      el("div", { class: "hint" }, how),
      runLine(q.outcome)));
}

// The run's report in the chat's words ("🟢 ran", "🔴 failed: …"), or nothing.
function runLine(run) {
  if (!run) return null;
  const words = (t) => (t && t.trim() ? ": " + t : "");
  let text;
  if (run.status === "executed") text = "🟢 ran" + words(run.summary);
  else if (run.status === "failed") text = "🔴 failed" + words(run.error || run.summary);
  else if (run.status === "not_executed") text = "⚪ not run" + words(run.summary);
  else text = "🟠 no report from the agent";
  return el("div", { class: "outcome" }, text);
}

// Revoking ends a standing approval at once: asked once more, then sent.
async function revoke(kind, id) {
  const ok = await confirmed("Revoke it now? The next such call asks a person again.");
  if (!ok) return;
  try {
    await api("/app/api/" + kind + "/" + encodeURIComponent(id) + "/revoke", {});
    await showList();
  } catch (e) {
    showError(e);
  }
}

async function showOne(id) {
  const { question: q, events } = await api("/app/api/questions/" + encodeURIComponent(id));
  const main = document.getElementById("main");
  const long = q.parameters.length > 600;
  const params = long
    ? el("details", {}, el("summary", {}, "Parameters (" + q.parameters.length + " characters)"),
        el("pre", { id: "parameters" }, q.parameters))
    : field("Parameters", q.parameters, true);
  if (!long) params.querySelector("pre").id = "parameters";
  main.replaceChildren(
    el("p", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); showList().catch(showError); } }, "← All")),
    el("div", { class: "card", "data-id": q.id },
      field("Kind", q.kind_words),
      field("Tool", q.has_call ? q.tool : null), field("Agent", q.agent), field("Owner", q.owner_id),
      field("MCP server", q.server), field("Hints (the server's own)", q.hints),
      field("The agent describes the call", q.briefing, true),
      field("Context from the agent", q.context, true),
      params,
      field("Approve also allows", q.window ? "identical calls for " + q.window : null),
      field("Deadline", q.expires_at),
      field("Args hash", q.args_hash),
      field("Status", q.status + (q.decided_by ? " by " + q.decided_by : "")),
      field("Approved with changes", q.changes),
      field("Answered", q.answers.map((a) => a.by + " at " + a.at).join("\n"), true),
      field("Trail", events.map((e) => e.at + " " + e.kind).join("\n"), true)),
    q.decidable ? decisionButtons(q) : null,
    q.decidable && q.editable && q.args_schema ? editForm(q) : null);
}

// --- Edit before execute -------------------------------------------------------------
// A form built from the tool's JSON Schema (pydantic's model_json_schema()), pre-filled
// with the call's parameters. The service checks the edit against the schema; the page
// only turns inputs into JSON values and shows what the service says of each field.

// A property's own schema: a local $ref followed, and Optional[X] (anyOf X or null)
// read as X that may be left empty.
function resolved(schema, root) {
  let s = schema || {};
  for (let hops = 0; s.$ref && hops < 8; hops++) {
    const m = /^#\/(\$defs|definitions)\/(.+)$/.exec(s.$ref);
    s = m && root[m[1]] ? root[m[1]][m[2]] || {} : {};
  }
  const options = s.anyOf || s.oneOf;
  if (Array.isArray(options)) {
    const real = options.filter((o) => o.type !== "null");
    if (real.length === 1) return Object.assign({}, resolved(real[0], root), { nullable: true, title: s.title, description: s.description });
  }
  return s;
}

function inputFor(name, schema, value) {
  const kind = Array.isArray(schema.enum) ? "enum" : schema.type;
  let input;
  if (kind === "enum") {
    input = el("select", {});
    for (const option of schema.enum) {
      const o = el("option", { value: JSON.stringify(option) }, String(option));
      if (JSON.stringify(option) === JSON.stringify(value)) o.selected = true;
      input.append(o);
    }
    input.read = () => JSON.parse(input.value);
  } else if (kind === "boolean") {
    input = el("input", { type: "checkbox", checked: value === true });
    input.read = () => input.checked;
  } else if (kind === "integer" || kind === "number") {
    input = el("input", { type: "text", inputMode: "decimal", value: value === undefined || value === null ? "" : String(value) });
    // Not a number stays the text typed: the service names the field's error.
    input.read = () => {
      const t = input.value.trim();
      if (t === "") return schema.nullable ? null : undefined;
      return /^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(t) ? Number(t) : t;
    };
  } else if (kind === "string") {
    const text = value === undefined || value === null ? "" : String(value);
    input = text.length > 60 || text.includes("\n")
      ? el("textarea", { rows: 3, value: text })
      : el("input", { type: "text", value: text });
    input.read = () => (input.value === "" && schema.nullable ? null : input.value);
  } else {
    // Objects, arrays and anything else: edited as JSON.
    input = el("textarea", { rows: 4, value: value === undefined ? "" : JSON.stringify(value, null, 2) });
    input.read = () => {
      if (input.value.trim() === "") return undefined;
      try { return JSON.parse(input.value); } catch (_) { throw { field: name, message: "is not valid JSON" }; }
    };
  }
  input.name = name;
  input.id = "edit-" + name;
  return input;
}

function editForm(q) {
  const schema = q.args_schema;
  const params = q.parameters_json || {};
  const properties = schema.properties || {};
  const names = Object.keys(properties);
  for (const k of Object.keys(params)) if (!names.includes(k)) names.push(k);
  const inputs = {};
  const form = el("form", { class: "card", id: "edit" }, el("h2", {}, "✏️ Edit, then approve"));
  for (const name of names) {
    const s = resolved(properties[name], schema);
    const input = inputFor(name, s, params[name]);
    inputs[name] = input;
    form.append(el("div", { class: "field" },
      el("label", { class: "label", htmlFor: input.id }, fieldLabel(name, s.title)),
      s.description ? el("div", { class: "hint" }, s.description) : null,
      input,
      el("div", { class: "field-error", "data-error-for": name })));
  }
  form.append(el("button", { type: "submit", id: "approve_edited" }, "✅ Approve with these values"));
  form.onsubmit = (e) => {
    e.preventDefault();
    submitEdit(q, inputs).catch(showError);
  };
  return form;
}

// The schema's title, with the parameter's own name when the title is not just that name
// spelled otherwise (pydantic titles `amount` "Amount").
function fieldLabel(name, title) {
  if (!title) return name;
  const plain = (t) => t.toLowerCase().replace(/[\s_-]+/g, "");
  return plain(title) === plain(name) ? title : title + " (" + name + ")";
}

function showFieldErrors(fields) {
  for (const box of document.querySelectorAll(".field-error")) box.textContent = "";
  const rest = [];
  for (const f of fields) {
    const top = f.field.split(/[.[]/)[0];
    const box = document.querySelector('[data-error-for="' + CSS.escape(top) + '"]');
    if (box && top) box.textContent = (box.textContent ? box.textContent + "; " : "") + (f.field === top ? "" : f.field + ": ") + f.message;
    else rest.push((f.field ? f.field + ": " : "") + f.message);
  }
  if (rest.length > 0) showError(new Error(rest.join("; ")));
}

async function submitEdit(q, inputs) {
  const parameters = {};
  try {
    for (const [name, input] of Object.entries(inputs)) {
      const v = input.read();
      if (v !== undefined) parameters[name] = v;
    }
  } catch (bad) {
    showFieldErrors([bad]);
    return;
  }
  document.getElementById("error").hidden = true;
  if (q.confirm_twice) {
    const ok = await confirmed("Approve " + q.tool + " for " + q.owner_id + " with these values? This route asks you to confirm twice.");
    if (!ok) return;
  }
  try {
    const done = await api("/app/api/questions/" + encodeURIComponent(q.id) + "/decision",
      { action: "approve", args_hash: q.args_hash, parameters });
    showDone(done);
  } catch (e) {
    if (e.fields) showFieldErrors(e.fields);
    else showError(e);
  }
}

function showDone(done) {
  document.getElementById("main").replaceChildren(
    el("p", { id: "decided" }, "Done: " + done.status + (done.decided_by ? " by " + done.decided_by : "") +
      (done.changes ? ", with changes: " + done.changes : "") + "."),
    el("p", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); showList().catch(showError); } }, "← All")));
}

// Asks yes or no: Telegram's own dialog inside Telegram, the browser's elsewhere.
function confirmed(text) {
  const tg = window.Telegram && window.Telegram.WebApp;
  if (tg && tg.showConfirm && tg.initData) {
    return new Promise((resolve) => tg.showConfirm(text, resolve));
  }
  return Promise.resolve(window.confirm(text));
}

// The decision names the call the page showed (its args hash): a question that changed
// or ended meanwhile is refused (409), never decided blind.
async function decide(q, action, reason) {
  if (action.startsWith("approve") && q.confirm_twice) {
    const ok = await confirmed("Approve " + (q.has_call ? q.tool : "this " + q.kind_words) + " for " + q.owner_id + "? This route asks you to confirm twice.");
    if (!ok) return;
  }
  const body = { action, args_hash: q.args_hash };
  if (reason !== undefined) body.reason = reason;
  try {
    const done = await api("/app/api/questions/" + encodeURIComponent(q.id) + "/decision", body);
    showDone(done);
  } catch (e) {
    showError(e);
  }
}

function decisionButtons(q) {
  const box = el("div", { class: "card", id: "decision" });
  if (q.window) {
    box.append(el("button", { id: "approve", onclick: () => decide(q, "approve") }, "✅ Approve once"), " ",
      el("button", { id: "approve_window", onclick: () => decide(q, "approve_window") }, "✅ Approve for " + q.window));
  } else {
    box.append(el("button", { id: "approve", onclick: () => decide(q, "approve") }, "✅ Approve"));
  }
  const reason = el("textarea", { id: "reason", rows: 2, placeholder: "Why not? (sent to the agent)" });
  box.append(" ", el("button", { id: "cancel", onclick: () => decide(q, "cancel") }, "❌ Cancel"),
    el("div", { class: "field" }, reason,
      el("button", { id: "deny", onclick: () => decide(q, "deny", reason.value) }, "✋ Deny with reason")));
  return box;
}

function start() {
  if (!DATA) {
    showError(new Error("Open this console from Telegram: it needs the launch data Telegram gives it."));
    document.getElementById("main").replaceChildren();
    return;
  }
  const params = new URLSearchParams(DATA);
  try {
    const user = JSON.parse(params.get("user") || "{}");
    document.getElementById("who").textContent = user.first_name ? "Signed in by Telegram as " + user.first_name : "";
  } catch (_) { /* the service checks the data; the greeting is only a courtesy */ }
  // From a question's button: ?q=<id> (a web_app button in a private chat), or the
  // launch data's start_param (the app's link from a group).
  const wanted = params.get("start_param") || new URLSearchParams(location.search).get("q");
  const first = wanted ? showOne(wanted) : showList();
  first.catch(showError);
}

start();
