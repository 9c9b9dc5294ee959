// The console reads the launch data Telegram put in the URL fragment itself
// (#tgWebAppData=...), so it works without Telegram's script; with it, inside a Telegram
// client, the primary action is Telegram's Main Button, "back" its Back Button, and a
// decision is felt as a haptic. Every value is put on the page as text, never as HTML.
"use strict";

const FRAGMENT = new URLSearchParams(location.hash.slice(1));

function launchData() {
  const fromFragment = FRAGMENT.get("tgWebAppData");
  if (fromFragment) return fromFragment;
  const w = window.Telegram && window.Telegram.WebApp;
  return w && w.initData ? w.initData : "";
}

const DATA = launchData();

// --- Telegram's look ------------------------------------------------------------------
// The theme the client passed (tgWebAppThemeParams: {"bg_color": "#17212b", ...}) as the
// --tg-theme-* variables the stylesheet reads: at once, before Telegram's script (which
// sets the same ones, and follows a theme change) has loaded, or when it cannot load.
function applyTheme(raw) {
  let theme;
  try { theme = JSON.parse(raw || "{}"); } catch (_) { return; }
  if (!theme || typeof theme !== "object") return;
  const root = document.documentElement;
  for (const [key, value] of Object.entries(theme)) {
    // Colours only: anything else in a hostile fragment is ignored.
    if (/^[a-z_]{1,40}$/.test(key) && /^#[0-9a-fA-F]{6}$/.test(String(value))) {
      root.style.setProperty("--tg-theme-" + key.replace(/_/g, "-"), value);
    }
  }
  const bg = /^#([0-9a-fA-F]{6})$/.exec(String(theme.bg_color || ""));
  if (bg) {
    const n = parseInt(bg[1], 16);
    const luma = 0.2126 * (n >> 16) + 0.7152 * ((n >> 8) & 255) + 0.0722 * (n & 255);
    root.dataset.scheme = luma < 120 ? "dark" : "light";
  }
}

applyTheme(FRAGMENT.get("tgWebAppThemeParams"));

// --- Native controls ------------------------------------------------------------------
// Telegram's WebApp once its script is in and the page runs in a Telegram client; null
// in a plain browser, where the same actions are ordinary buttons on the page.
let tg = null;
// What the Main Button does on this view ({text, run} or null), where the Back Button
// goes (a function or null), and whether closing would lose something typed.
const controls = { main: null, back: null, unsent: false, sending: false };

function setControls(main, back) {
  controls.main = main;
  controls.back = back;
  controls.unsent = false;
  syncControls();
}

function syncControls() {
  if (!tg) return;
  const button = tg.MainButton;
  if (controls.main) {
    button.setText(controls.main.text);
    button.show();
  } else {
    button.hide();
  }
  if (controls.back) tg.BackButton.show(); else tg.BackButton.hide();
  if (controls.unsent) tg.enableClosingConfirmation(); else tg.disableClosingConfirmation();
}

async function pressMain() {
  const action = controls.main;
  if (!action || controls.sending) return;
  controls.sending = true;
  if (tg) tg.MainButton.showProgress(false);
  try {
    await action.run();
  } finally {
    controls.sending = false;
    if (tg) tg.MainButton.hideProgress();
  }
}

// A notification haptic on the phone: "success" or "error".
function feel(kind) {
  if (tg && tg.HapticFeedback) tg.HapticFeedback.notificationOccurred(kind);
}

// Whether a Telegram client hosts the page, by the bridges Telegram's script posts to:
// the phone and desktop apps' proxy, or the frame of Telegram's web client. A browser
// opened on a `console-link` has none, and keeps the page's own buttons.
function insideTelegramClient() {
  if (window.TelegramWebviewProxy !== undefined) return true;
  if (window.external && "notify" in window.external) return true;
  try {
    return window.parent !== null && window.parent !== window;
  } catch (_) {
    return true;
  }
}

function adoptTelegram() {
  const w = window.Telegram && window.Telegram.WebApp;
  if (!w || !w.initData || !insideTelegramClient()) return;
  tg = w;
  document.body.classList.add("native");
  tg.MainButton.onClick(() => { pressMain().catch(showError); });
  tg.BackButton.onClick(() => { if (controls.back) controls.back(); });
  // The scheme follows the client's (Telegram's script updates the colours itself).
  const scheme = () => { document.documentElement.dataset.scheme = tg.colorScheme; };
  scheme();
  tg.onEvent("themeChanged", scheme);
  tg.ready();
  tg.expand();
  syncControls();
}

// Telegram's script, loaded after the page shows (a network without telegram.org must
// not hold it up); adopted when it arrives.
function loadTelegram() {
  if (window.Telegram && window.Telegram.WebApp) { adoptTelegram(); return; }
  const script = document.createElement("script");
  script.src = "https://telegram.org/js/telegram-web-app.js";
  script.async = true;
  script.onload = adoptTelegram;
  document.head.append(script);
}

// --- Times ----------------------------------------------------------------------------
// The service writes times as the chat does (`2026-12-06 03:02:44 UTC`); the page shows
// each in the viewer's own time zone, its offset written the same way everywhere
// (`2026-12-06 08:32:44 GMT+5:30`; "IST" names three zones), and the zone's name under
// the title.
const ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone;
const LOCAL = new Intl.DateTimeFormat("en-GB", {
  year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
  second: "2-digit", hourCycle: "h23", timeZoneName: "shortOffset",
});

function instant(text) {
  const m = /^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) UTC$/.exec(text || "");
  return m ? new Date(Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6])) : null;
}

function localTime(text) {
  const at = instant(text);
  if (!at) return text || "";
  const p = {};
  for (const part of LOCAL.formatToParts(at)) p[part.type] = part.value;
  // A viewer on UTC reads it as the chat writes it.
  const zone = /^GMT(\+0)?$/.test(p.timeZoneName) ? "UTC" : p.timeZoneName;
  return p.year + "-" + p.month + "-" + p.day + " " + p.hour + ":" + p.minute + ":" +
    p.second + " " + zone;
}

// "expires in 4 min", kept current by `tick`.
function countdown(text) {
  return el("span", { class: "countdown", "data-deadline": text }, until(text));
}

function until(text) {
  const at = instant(text);
  if (!at) return "";
  const left = Math.round((at.getTime() - Date.now()) / 1000);
  if (left <= 0) return "expired";
  if (left < 60) return "expires in " + left + " s";
  if (left < 3600) return "expires in " + Math.round(left / 60) + " min";
  if (left < 172800) {
    return "expires in " + Math.floor(left / 3600) + " h " + Math.floor((left % 3600) / 60) + " min";
  }
  return "expires in " + Math.round(left / 86400) + " days";
}

function tick() {
  for (const node of document.querySelectorAll("[data-deadline]")) {
    const text = until(node.dataset.deadline);
    if (node.textContent !== text) node.textContent = text;
    const at = instant(node.dataset.deadline);
    node.classList.toggle("soon", at !== null && at.getTime() - Date.now() < 60000);
  }
}

// Statuses in words, as the chat writes them.
const STATUS_WORDS = {
  pending: "waiting", delivered: "waiting", partial: "partly answered",
  confirmed: "approved", completed: "approved and answered", cancelled: "cancelled",
  timeout: "timed out",
};

function statusWords(q) {
  return (STATUS_WORDS[q.status] || q.status) + (q.decided_by ? " by " + q.decided_by : "");
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-") || k.startsWith("aria-")) node.setAttribute(k, v);
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
  feel("error");
}

function clearError() {
  document.getElementById("error").hidden = true;
}

function field(label, value, pre) {
  if (value === null || value === undefined || value === "") return null;
  return el("div", { class: "field" },
    el("div", { class: "label" }, label),
    pre ? el("pre", {}, value) : el("div", {}, value));
}

// A waiting question in the list: what, whose, and how long it has left.
function summary(q) {
  return el("div", {},
    el("strong", {}, q.title), " · ", q.agent,
    el("div", { class: "hint" }, "owner " + q.owner_id + " · ", countdown(q.expires_at)));
}

// The waiting questions grouped by route, each group with its count, the soonest
// deadline first in each and the group whose deadline is soonest first.
function byRoute(questions) {
  const deadline = (q) => (instant(q.expires_at) || new Date(8.64e15)).getTime();
  const sorted = questions.slice().sort((a, b) => deadline(a) - deadline(b));
  const groups = new Map();
  for (const q of sorted) {
    if (!groups.has(q.route)) groups.set(q.route, []);
    groups.get(q.route).push(q);
  }
  return groups;
}

async function showList() {
  const main = document.getElementById("main");
  const [{ questions }, { windows }, { grants }, ended, stats] = await Promise.all([
    api("/app/api/questions"), api("/app/api/windows"), api("/app/api/grants"),
    api(ENDED_PAGE), api("/app/api/stats")]);
  setControls(null, null);
  main.replaceChildren();
  if (questions.length === 0) {
    main.append(el("p", { class: "hint" }, "Nothing waits for you."));
  }
  for (const [route, group] of byRoute(questions)) {
    main.append(el("h2", { "data-route-group": route }, "Route " + route + " ",
      el("span", { class: "count" }, "· " + group.length + " waiting")));
    for (const q of group) {
      main.append(el("div", { class: "card", "data-id": q.id },
        el("button", { class: "open", onclick: () => showOne(q.id).catch(showError) }, summary(q))));
    }
  }
  if (windows.length > 0) main.append(el("h2", {}, "Open windows"));
  for (const w of windows) {
    main.append(el("div", { class: "card", "data-window": w.id },
      el("div", {}, el("strong", {}, w.tool), " · ", w.agent, " · owner ", w.owner_id),
      el("div", { class: "hint" }, "until " + localTime(w.expires_at) + " · let through " + w.calls + " call(s)" +
        (w.failed > 0 ? ", " + w.failed + " failed" : "")),
      el("button", { class: "destructive", onclick: () => revoke("windows", w.id) }, "🔒 Revoke")));
  }
  if (grants.length > 0) main.append(el("h2", {}, "Grants"));
  for (const g of grants) {
    main.append(el("div", { class: "card", "data-grant": g.id },
      el("div", {}, g.agent, " may run ", g.scope, " for ", g.owner_id),
      el("div", { class: "hint" }, "granted by " + g.granted_by + " · until " + localTime(g.expires_at)),
      el("button", { class: "destructive", onclick: () => revoke("grants", g.id) }, "🔒 Revoke")));
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
    class: "secondary",
    onclick: () => api(ENDED_PAGE + "&before=" + encodeURIComponent(page.next))
      .then((next) => showEnded(section, next)).catch(showError),
  }, "More"));
}

// An ended question: what was asked, how it ended and by whom, when, and what the
// agent reported of running it; tapping it opens it whole.
function endedCard(q) {
  const how = statusWords(q) + (q.decided_at ? " · " + localTime(q.decided_at) : "");
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
    feel("success");
    await showList();
  } catch (e) {
    showError(e);
  }
}

function backToList() {
  clearError();
  showList().catch(showError);
}

async function showOne(id) {
  const { question: q, events } = await api("/app/api/questions/" + encodeURIComponent(id));
  const main = document.getElementById("main");
  const form = q.decidable && q.editable && q.args_schema ? editForm(q) : null;
  const long = q.parameters.length > 600;
  const params = long
    ? el("details", {}, el("summary", {}, "Parameters (" + q.parameters.length + " characters)"),
        el("pre", { id: "parameters" }, q.parameters))
    : field("Parameters", q.parameters, true);
  if (!long) params.querySelector("pre").id = "parameters";
  // The hash names the exact call approved; 64 hex digits, folded under the parameters.
  const hash = el("details", { class: "field", id: "hash" },
    el("summary", {}, "Args hash " + q.args_hash.slice(0, 12) + "…"),
    el("code", { id: "args-hash" }, q.args_hash));
  const deadline = q.decidable
    ? el("div", { class: "field" }, el("div", { class: "label" }, "Deadline"),
        el("div", {}, localTime(q.expires_at) + " · ", countdown(q.expires_at)))
    : field("Deadline", localTime(q.expires_at));
  main.replaceChildren(
    el("p", { class: "back" }, el("a", { href: "#", onclick: (e) => { e.preventDefault(); backToList(); } }, "← All")),
    el("div", { class: "card", "data-id": q.id },
      field("Kind", q.kind_words),
      field("Tool", q.has_call ? q.tool : null), field("Agent", q.agent), field("Owner", q.owner_id),
      field("Route", q.route),
      field("MCP server", q.server), field("Hints (the server's own)", q.hints),
      field("The agent describes the call", q.briefing, true),
      field("Context from the agent", q.context, true),
      params,
      hash,
      field("Approve also allows", q.window ? "identical calls for " + q.window : null),
      deadline,
      field("Status", statusWords(q)),
      field("Approved with changes", q.changes),
      field("Answered", q.answers.map((a) => a.by + " at " + localTime(a.at)).join("\n"), true),
      field("Trail", events.map((e) => localTime(e.at) + " " + e.kind).join("\n"), true)),
    q.decidable ? decisionButtons(q) : null,
    form);
  setControls(q.decidable ? approveAction(q) : null, backToList);
  if (form) form.refresh();
  tick();
}

// The Main Button's plain approve: once, even where Approve for a window is offered
// (the wider approval stays a deliberate tap on the page).
function approveAction(q) {
  return { text: q.window ? "✅ Approve once" : "✅ Approve", run: () => decide(q, "approve") };
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
  // What approving would change, a line per parameter as the chat will write it.
  const changes = el("div", { class: "changes", id: "changes", "aria-live": "polite" });
  form.append(changes,
    el("button", { type: "submit", id: "approve_edited", class: "primary" }, "✅ Approve with these values"));
  form.onsubmit = (e) => {
    e.preventDefault();
    submitEdit(q, inputs).catch(showError);
  };
  // Each keystroke: the lines, the Main Button (approve as asked, or with these values)
  // and whether closing the console would lose the edit.
  form.refresh = () => {
    const lines = changeLines(params, edited(inputs));
    changes.replaceChildren(lines.length === 0
      ? el("div", { class: "hint" }, "No change yet: approving runs the call as the agent sent it.")
      : el("div", { class: "label" }, "Approving changes"),
    ...lines.map((line) => el("div", { class: "change" }, line)));
    if (controls.main && !controls.sending) {
      controls.main = lines.length === 0 ? approveAction(q)
        : { text: "✅ Approve with these values", run: () => submitEdit(q, inputs) };
    }
    controls.unsent = lines.length > 0 || reasonTyped();
    syncControls();
  };
  form.addEventListener("input", form.refresh);
  form.addEventListener("change", form.refresh);
  return form;
}

// The parameters the inputs hold now; a field that cannot be read (JSON mistyped) is
// left as it was, for the line-by-line view (approving names the field's error).
function edited(inputs) {
  const out = {};
  for (const [name, input] of Object.entries(inputs)) {
    try {
      const v = input.read();
      if (v !== undefined) out[name] = v;
    } catch (_) { /* shown when approving */ }
  }
  return out;
}

// JSON with every object's keys sorted, as the service compares and writes values.
function canonical(v) {
  if (Array.isArray(v)) return "[" + v.map(canonical).join(",") + "]";
  if (v && typeof v === "object") {
    return "{" + Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + canonical(v[k])).join(",") + "}";
  }
  return JSON.stringify(v);
}

// `amount 1200.5 → 1000`: the top-level parameters that differ, changed and added ones
// in key order, then the removed ones (the service's `edit::changes_text`, per line).
function changeLines(before, after) {
  const lines = [];
  for (const key of Object.keys(after).sort()) {
    const now = canonical(after[key]);
    if (!(key in before)) lines.push(key + " (none) → " + now);
    else if (canonical(before[key]) !== now) lines.push(key + " " + canonical(before[key]) + " → " + now);
  }
  for (const key of Object.keys(before).sort()) {
    if (!(key in after)) lines.push(key + " " + canonical(before[key]) + " → (removed)");
  }
  return lines;
}

function reasonTyped() {
  const reason = document.getElementById("reason");
  return reason !== null && reason.value.trim() !== "";
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
  else feel("error");
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
  clearError();
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
  feel("success");
  document.getElementById("main").replaceChildren(
    el("p", { id: "decided" }, "Done: " + statusWords(done) +
      (done.changes ? ", with changes: " + done.changes : "") + "."),
    el("p", { class: "back" }, el("a", { href: "#", onclick: (e) => { e.preventDefault(); backToList(); } }, "← All")));
  setControls(null, backToList);
}

// Asks yes or no: Telegram's own dialog inside Telegram, the browser's elsewhere.
function confirmed(text) {
  if (tg && tg.showConfirm) {
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
    box.append(el("button", { id: "approve", class: "primary", onclick: () => decide(q, "approve") }, "✅ Approve once"), " ",
      el("button", { id: "approve_window", onclick: () => decide(q, "approve_window") }, "✅ Approve for " + q.window));
  } else {
    box.append(el("button", { id: "approve", class: "primary", onclick: () => decide(q, "approve") }, "✅ Approve"));
  }
  const reason = el("textarea", { id: "reason", rows: 2, placeholder: "Why not? (sent to the agent)" });
  // A typed reason not yet sent: closing the console asks first.
  reason.addEventListener("input", () => {
    const form = document.getElementById("edit");
    if (form && form.refresh) { form.refresh(); return; }
    controls.unsent = reasonTyped();
    syncControls();
  });
  box.append(" ", el("button", { id: "cancel", class: "destructive", onclick: () => decide(q, "cancel") }, "❌ Cancel"),
    el("div", { class: "field" }, reason,
      el("button", { id: "deny", class: "destructive", onclick: () => decide(q, "deny", reason.value) }, "✋ Deny with reason")));
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
    document.getElementById("who").textContent =
      (user.first_name ? "Signed in by Telegram as " + user.first_name + " · " : "") + "times in " + ZONE;
  } catch (_) { /* the service checks the data; the greeting is only a courtesy */ }
  // From a question's button: ?q=<id> (a web_app button in a private chat), or the
  // launch data's start_param (the app's link from a group).
  const wanted = params.get("start_param") || new URLSearchParams(location.search).get("q");
  const first = wanted ? showOne(wanted) : showList();
  first.catch(showError);
  setInterval(tick, 1000);
  loadTelegram();
}

start();
