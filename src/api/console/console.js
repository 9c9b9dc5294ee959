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
    throw new Error(message);
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

function summary(q) {
  return el("div", {},
    el("strong", {}, q.tool), " · ", q.agent,
    el("div", { class: "hint" }, "owner " + q.owner_id + " · until " + q.expires_at));
}

async function showList() {
  const main = document.getElementById("main");
  const [{ questions }, { windows }, { grants }, ended] = await Promise.all([
    api("/app/api/questions"), api("/app/api/windows"), api("/app/api/grants"),
    api(ENDED_PAGE)]);
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
      el("div", {}, el("strong", {}, q.tool), " · ", q.agent),
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
      field("Tool", q.tool), field("Agent", q.agent), field("Owner", q.owner_id),
      field("The agent describes the call", q.briefing, true),
      field("Context from the agent", q.context, true),
      params,
      field("Approve also allows", q.window ? "identical calls for " + q.window : null),
      field("Deadline", q.expires_at),
      field("Args hash", q.args_hash),
      field("Status", q.status + (q.decided_by ? " by " + q.decided_by : "")),
      field("Answered", q.answers.map((a) => a.by + " at " + a.at).join("\n"), true),
      field("Trail", events.map((e) => e.at + " " + e.kind).join("\n"), true)),
    q.decidable ? decisionButtons(q) : null);
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
    const ok = await confirmed("Approve " + q.tool + " for " + q.owner_id + "? This route asks you to confirm twice.");
    if (!ok) return;
  }
  const body = { action, args_hash: q.args_hash };
  if (reason !== undefined) body.reason = reason;
  try {
    const done = await api("/app/api/questions/" + encodeURIComponent(q.id) + "/decision", body);
    document.getElementById("main").replaceChildren(
      el("p", { id: "decided" }, "Done: " + done.status + (done.decided_by ? " by " + done.decided_by : "") + "."),
      el("p", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); showList().catch(showError); } }, "← All")));
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
