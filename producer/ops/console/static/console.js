// Live updates for the console's pages (no build step, no framework). Data from the server is
// only ever set as text, never parsed as HTML.
"use strict";

function badge(status) {
  const span = document.createElement("span");
  span.className = "badge s-" + String(status).toLowerCase();
  span.textContent = String(status).toLowerCase();
  return span;
}

function markLive(on) {
  const dot = document.getElementById("live-dot");
  if (dot) dot.classList.toggle("on", on);
}

function followSession(list) {
  const session = list.dataset.session;
  let after = list.dataset.after || "0";
  let count = 0;
  const source = new EventSource("/live/sessions/" + encodeURIComponent(session) + "?after=" + after);
  source.onopen = () => markLive(true);
  source.onerror = () => markLive(false);
  source.addEventListener("event", (message) => {
    const e = JSON.parse(message.data);
    const item = document.createElement("li");
    item.className = "fresh t-" + e.type.toLowerCase();
    item.dataset.seq = e.seq;
    item.dataset.type = e.type;
    item.textContent = e.seq + "  " + e.type + "  " + (e.run_id || "-") + "  s" + e.step + "  " + e.summary;
    list.prepend(item);
    count += 1;
    const counter = document.getElementById("live-count");
    if (counter) counter.textContent = count + " new";
    if (e.type === "MODEL_RESPONSE") commitText(list, e);
  });
  // the model's text growing while a worker streams it (pieces, never stored)
  source.addEventListener("delta", (message) => growText(list, JSON.parse(message.data)));
}

function textItem(list, d) {
  const selector = 'li.live-text[data-run="' + CSS.escape(d.run_id) + '"][data-step="' + d.step + '"]';
  let item = list.querySelector(selector);
  if (!item) {
    item = document.createElement("li");
    item.className = "live-text";
    item.dataset.run = d.run_id;
    item.dataset.step = d.step;
    item.dataset.fence = d.fence;
    const label = document.createElement("span");
    label.className = "dim";
    label.textContent = "streaming  " + d.run_id + "  s" + d.step + "  ";
    const body = document.createElement("span");
    body.className = "text";
    item.append(label, body);
    list.prepend(item);
  }
  return item;
}

function growText(list, d) {
  const item = textItem(list, d);
  if (Number(d.fence) > Number(item.dataset.fence)) {
    // a newer attempt redoes the step (a worker died mid-stream): the text so far is void
    item.dataset.fence = d.fence;
    item.classList.add("redone");
    item.querySelector(".text").textContent = "";
  } else if (Number(d.fence) < Number(item.dataset.fence)) {
    return; // a late piece of the superseded attempt
  }
  const body = item.querySelector(".text");
  const prefix = d.kind === "tool_arguments" && d.tool_name ? " " + d.tool_name + "(" : "";
  body.textContent += prefix + d.text;
}

function commitText(list, e) {
  const selector = 'li.live-text[data-run="' + CSS.escape(e.run_id || "") + '"][data-step="' + e.step + '"]';
  const item = list.querySelector(selector);
  if (item) item.classList.add("committed");
}

function link(href, text) {
  const a = document.createElement("a");
  a.href = href;
  a.textContent = text;
  return a;
}

function isActive(run) {
  return run.status === "QUEUED" || run.status === "RUNNING";
}

function hidden(name, value) {
  const input = document.createElement("input");
  input.type = "hidden";
  input.name = name;
  input.value = value;
  return input;
}

function actionForm(table, kind, action, label, data) {
  // the same one-button form as the server renders (_status.html's cancel_form and wake_form),
  // for a row added or parked live
  const form = document.createElement("form");
  form.className = "inline " + kind + "-form";
  form.method = "post";
  form.action = action;
  form.appendChild(hidden("form_key", table.dataset.formKey));
  form.appendChild(hidden("back", table.dataset.back || "/runs"));
  const button = document.createElement("button");
  button.type = "submit";
  button.dataset[kind] = data;
  button.textContent = label;
  form.appendChild(button);
  return form;
}

function cancelForm(table, run) {
  const form = actionForm(table, "cancel", "/runs/" + encodeURIComponent(run.run_id) + "/cancel", "cancel", run.run_id);
  form.querySelector("button").className = "danger";
  return form;
}

function newRunRow(table, run) {
  // one cell per column of the table's header; the feed fills what it knows
  const row = document.createElement("tr");
  row.dataset.runId = run.run_id;
  for (const th of table.querySelectorAll("thead th")) {
    const cell = document.createElement("td");
    const col = th.dataset.col || "";
    cell.className = col;
    if (col === "run") cell.appendChild(link("/runs/" + encodeURIComponent(run.run_id), run.run_id));
    if (col === "session") cell.appendChild(link("/sessions/" + encodeURIComponent(run.session_id), run.session_id));
    if (col === "agent") cell.textContent = run.agent || "";
    if (col === "submitted") cell.textContent = run.submitted || "";
    if (col === "cancel" && table.dataset.formKey && isActive(run)) cell.appendChild(cancelForm(table, run));
    row.appendChild(cell);
  }
  const body = table.querySelector("tbody");
  const empty = body.querySelector("tr.empty");
  if (empty) empty.remove();
  body.prepend(row);
  return row;
}

function updateRun(table, run) {
  let row = table.querySelector('tr[data-run-id="' + CSS.escape(run.run_id) + '"]');
  if (!row) {
    if (!table.dataset.addNew) return;
    if (table.dataset.session && table.dataset.session !== run.session_id) return;
    row = newRunRow(table, run);
  }
  const status = row.querySelector(".status");
  if (status) {
    status.replaceChildren(badge(run.status));
    if (run.cancel_requested) {
      const note = document.createElement("span");
      note.className = "dim";
      note.textContent = " cancel requested";
      status.appendChild(note);
    }
    if (run.waiting) {
      const note = document.createElement("span");
      note.className = "dim waiting";
      note.textContent = " waiting for " + run.waiting;
      status.appendChild(note);
    }
  }
  const worker = row.querySelector(".worker");
  if (worker && run.worker) worker.textContent = run.worker;
  const attempts = row.querySelector(".attempts");
  if (attempts) attempts.textContent = run.attempts;
  if (!isActive(run) && !run.parked) {
    for (const form of row.querySelectorAll("form.cancel-form, form.wake-form")) form.remove();
  }
  offerParked(table, row, run);
}

function familyItems(nodes) {
  // a parent's children and theirs, as nested lists (text only)
  const items = [];
  for (const n of nodes) {
    const item = document.createElement("li");
    item.dataset.childSession = n.session_id;
    const agent = document.createElement("span");
    agent.className = "dim";
    agent.textContent = n.agent;
    item.append(link("/sessions/" + encodeURIComponent(n.session_id), n.session_id), " ", agent, " ", badge(n.status));
    if (n.children.length) {
      const sub = document.createElement("ul");
      sub.append(...familyItems(n.children));
      item.appendChild(sub);
    }
    items.push(item);
  }
  return items;
}

function followFamily(tree) {
  // the tree of children, sent again whenever a child starts, parks or ends
  const source = new EventSource("/live/sessions/" + encodeURIComponent(tree.dataset.session) + "/family");
  source.addEventListener("family", (message) => {
    const doc = JSON.parse(message.data);
    tree.replaceChildren(...familyItems(doc.children));
    const section = document.getElementById("family");
    if (section) section.hidden = doc.children.length === 0;
    const note = document.getElementById("family-note");
    if (note) note.textContent = doc.hidden ? "(" + doc.hidden + " more not shown)" : "";
    tree.dataset.updates = String(Number(tree.dataset.updates || "0") + 1);
  });
}

function wakeForm(table, run) {
  return actionForm(table, "wake", "/sessions/" + encodeURIComponent(run.session_id) + "/wake", "wake now", run.session_id);
}

function offerParked(table, row, run) {
  // a run parked on the fleet (a timer, a signal, children): wake it now, or cancel it
  const cell = row.querySelector("td.cancel") || row.lastElementChild;
  if (!run.parked || !table.dataset.formKey || !cell || row.querySelector("form.wake-form")) return;
  cell.appendChild(wakeForm(table, run));
  cell.appendChild(cancelForm(table, run));
}

function updateSessionStatus(run) {
  // the session page's header follows the session's newest run
  const header = document.getElementById("session-status");
  if (!header || header.dataset.session !== run.session_id) return;
  header.replaceChildren(badge(run.status));
}

function followRuns(tables) {
  // from the completion-feed position of the page, so nothing finished in between is missed
  const after = document.body.dataset.feedAfter || "";
  const source = new EventSource("/live/runs?after=" + encodeURIComponent(after));
  source.onopen = () => markLive(true);
  source.onerror = () => markLive(false);
  source.addEventListener("run", (message) => {
    const run = JSON.parse(message.data);
    for (const table of tables) updateRun(table, run);
    updateSessionStatus(run);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const list = document.getElementById("live-events");
  if (list) followSession(list);
  const tree = document.getElementById("family-tree");
  // only a session that has (or may yet spawn) children: each feed holds a slot of the console's
  if (tree && tree.dataset.follow) followFamily(tree);
  const tables = document.querySelectorAll("table[data-runs-feed]");
  if (tables.length) followRuns(Array.from(tables));
});
