"use strict";
// The mcp-tasks console: plain script, no library. Reads the admin API beside it and
// follows its feed of changes.
(function () {
  const base = location.pathname.replace(/\/+$/, "");
  const api = base + "/api";
  const $ = (id) => document.getElementById(id);
  const TERMINAL = ["completed", "failed", "cancelled"];
  let token = null;
  let allCursor = null;
  let feedAbort = null;
  // Whether the server gave the console controls (pause, drain); known from the stats.
  let hasControls = false;

  function readToken() {
    const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (m) {
      sessionStorage.setItem("mcp-tasks-admin-token", decodeURIComponent(m[1]));
      history.replaceState(null, "", location.pathname + location.search);
    }
    return sessionStorage.getItem("mcp-tasks-admin-token");
  }

  function notice(text) {
    const n = $("notice");
    n.textContent = text || "";
    n.hidden = !text;
  }

  async function call(path, method, body) {
    const headers = { Authorization: "Bearer " + token };
    const init = { method: method || "GET", headers: headers, cache: "no-store" };
    if (init.method !== "GET") {
      headers["X-Mcp-Tasks-Admin"] = "1";
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body || {});
    }
    const res = await fetch(api + path, init);
    const data = await res.json().catch(() => ({}));
    if (res.status === 401) {
      showLogin("The admin token was refused.");
      throw new Error("unauthorized");
    }
    if (!res.ok) {
      throw new Error(data.error || res.status + " " + res.statusText);
    }
    return data;
  }

  function el(tag, attrs, children) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "class") e.className = attrs[k];
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), attrs[k]);
      else e.setAttribute(k, attrs[k]);
    }
    for (const c of children || []) if (c != null) e.append(c);
    return e;
  }

  const short = (id) => id.slice(0, 8);
  const when = (t) => (t ? t.replace("T", " ").replace(/\.\d+Z$/, "Z") : "");

  function owner(t) {
    return t.owner ? t.owner : el("span", { class: "muted", text: "(bearer)" });
  }

  function idLink(t) {
    return el("a", { class: "id", text: short(t.taskId), title: t.taskId, onclick: () => openDetail(t.taskId) });
  }

  function bar(t) {
    const b = el("div", { class: "bar" }, [el("span")]);
    setBar(b, t);
    return b;
  }

  function setBar(b, t) {
    const p = t.progress;
    const span = b.firstChild;
    if (p && p.total > 0) {
      const pct = Math.max(0, Math.min(100, (100 * p.done) / p.total));
      b.classList.remove("unknown");
      span.style.width = pct + "%";
      b.dataset.done = String(p.done);
      b.dataset.total = String(p.total);
    } else {
      b.classList.add("unknown");
      span.style.width = "";
      delete b.dataset.done;
    }
    b.title = t.statusMessage || "";
  }

  function confirmThen(question, action) {
    return async () => {
      if (!window.confirm(question)) return;
      try {
        await action();
        notice("");
      } catch (e) {
        notice(e.message);
      }
    };
  }

  function cancelButton(t) {
    return el("button", {
      class: "danger cancel",
      text: "Cancel",
      onclick: confirmThen("Cancel task " + t.taskId + " (" + t.tool + ")?", () =>
        call("/tasks/" + encodeURIComponent(t.taskId) + "/cancel", "POST")),
    });
  }

  function rerunButton(t) {
    return el("button", {
      class: "rerun",
      text: "Rerun",
      onclick: confirmThen("Run " + t.tool + " again with the arguments of " + t.taskId + "?", async () => {
        const r = await call("/tasks/" + encodeURIComponent(t.taskId) + "/rerun", "POST");
        openDetail(r.task.taskId);
      }),
    });
  }

  function pauseButton(tool) {
    return el("button", {
      class: "pause",
      text: "Pause " + tool,
      onclick: confirmThen("Pause the tool " + tool + "? No new task of it starts until it is resumed.", () =>
        call("/tools/" + encodeURIComponent(tool) + "/pause", "POST").then(showControls)),
    });
  }

  const rows = {
    running: (t) => [idLink(t), t.tool, owner(t), bar(t), t.lease ? t.lease.worker : "queued", cancelButton(t)],
    waiting: (t) => [idLink(t), t.tool, owner(t), t.question || t.statusMessage || t.openQuestions + " open", cancelButton(t)],
    failed: (t) => [idLink(t), t.tool, owner(t), el("span", { class: "bad", text: t.error || t.statusMessage || "" }), when(t.updatedAt), rerunButton(t)],
    all: (t) => [idLink(t), el("span", { class: "status-" + t.status, text: t.status }), t.tool, owner(t), t.statusMessage || "", when(t.createdAt)],
  };
  const tableOf = { working: "running", input_required: "waiting", failed: "failed" };

  function row(table, t) {
    const tr = el("tr", { "data-id": t.taskId, "data-status": t.status, "data-version": String(t.version) });
    for (const cell of rows[table](t)) tr.append(el("td", {}, [cell]));
    return tr;
  }

  function render(table, tasks, append) {
    const body = $(table).tBodies[0];
    if (!append) body.replaceChildren();
    for (const t of tasks) body.append(row(table, t));
  }

  // A new version of a task from the feed: each table shows it where it belongs now.
  function apply(t) {
    for (const table of ["running", "waiting", "failed", "all"]) {
      const body = $(table).tBodies[0];
      const old = body.querySelector('tr[data-id="' + CSS.escape(t.taskId) + '"]');
      if (old && Number(old.dataset.version) > t.version) continue;
      const belongs = table === "all" ? old != null || matchesFilter(t) : tableOf[t.status] === table;
      if (!belongs) {
        if (old) old.remove();
        continue;
      }
      if (old && table === "running" && old.dataset.status === t.status) {
        setBar(old.querySelector(".bar"), t);
        old.dataset.version = String(t.version);
        old.cells[4].textContent = t.lease ? t.lease.worker : "queued";
        continue;
      }
      const fresh = row(table, t);
      if (old) old.replaceWith(fresh);
      else body.prepend(fresh);
    }
    if ($("detail").dataset.id === t.taskId) openDetail(t.taskId, true);
  }

  function matchesFilter(t) {
    const f = filterValues();
    if (f.q || f.createdAfter) return false;
    return (!f.status || f.status === t.status) && (!f.tool || f.tool === t.tool) && (!f.owner || f.owner === t.owner);
  }

  function filterValues() {
    return { status: $("f-status").value, tool: $("f-tool").value.trim(), owner: $("f-owner").value.trim(), createdAfter: $("f-after").value.trim(), q: $("f-q").value.trim() };
  }

  function query(params) {
    const q = new URLSearchParams();
    for (const k in params) if (params[k]) q.set(k, params[k]);
    return "?" + q.toString();
  }

  async function loadAll(more) {
    const params = filterValues();
    params.limit = "50";
    if (more) params.cursor = allCursor;
    const page = await call("/tasks" + query(params));
    render("all", page.tasks, more);
    allCursor = page.nextCursor;
    $("more").hidden = !allCursor;
  }

  async function loadLists() {
    const [running, waiting, failed] = await Promise.all([
      call("/tasks?status=working&limit=100"),
      call("/tasks?status=input_required&limit=100"),
      call("/tasks?status=failed&limit=20"),
    ]);
    render("running", running.tasks);
    render("waiting", waiting.tasks);
    render("failed", failed.tasks);
    await loadAll(false);
  }

  function countTable(id, counts) {
    const t = $(id);
    t.replaceChildren();
    for (const k of Object.keys(counts)) {
      const tr = el("tr", { "data-key": k }, [el("td", { text: k }), el("td", { class: "n", text: String(counts[k]) })]);
      if (id === "by-tool" && hasControls) tr.append(el("td", {}, [pauseButton(k)]));
      t.append(tr);
    }
    if (!Object.keys(counts).length) t.append(el("tr", {}, [el("td", { class: "muted", text: "no tasks" })]));
  }

  function sparkline(buckets) {
    const svg = $("spark");
    const ns = "http://www.w3.org/2000/svg";
    svg.replaceChildren();
    const max = Math.max(1, ...buckets.map((b) => b.finished));
    const w = 600 / buckets.length;
    buckets.forEach((b, i) => {
      for (const [n, cls] of [[b.finished, "f"], [b.failed, "x"]]) {
        if (!n) continue;
        const r = document.createElementNS(ns, "rect");
        const h = (58 * n) / max;
        r.setAttribute("x", String(i * w + 1));
        r.setAttribute("width", String(Math.max(1, w - 2)));
        r.setAttribute("y", String(60 - h));
        r.setAttribute("height", String(h));
        r.setAttribute("class", cls);
        const title = document.createElementNS(ns, "title");
        title.textContent = when(b.at) + ": " + b.finished + " finished, " + b.failed + " failed";
        r.append(title);
        svg.append(r);
      }
    });
  }

  function showStats(s) {
    hasControls = s.paused !== null && s.paused !== undefined;
    countTable("by-status", s.byStatus);
    countTable("by-tool", s.byTool);
    sparkline(s.rates.sparkline);
    if (s.paused !== null && s.paused !== undefined) {
      $("controls-state").textContent = "paused tools: " + (s.paused.length ? s.paused.join(", ") : "none") + (s.draining ? " · this process drains" : "");
    } else {
      $("controls-state").textContent = "pausing tools and draining: not available on this server";
    }
  }

  function showControls(c) {
    $("controls-state").textContent = "paused tools: " + (c.paused.length ? c.paused.join(", ") : "none") + (c.draining ? " · this process drains" : "");
  }

  async function openDetail(id, quiet) {
    let t;
    try {
      t = await call("/tasks/" + encodeURIComponent(id));
    } catch (e) {
      if (!quiet) notice(e.message);
      return;
    }
    const d = $("detail");
    d.hidden = false;
    d.dataset.id = id;
    $("d-id").textContent = id;
    const actions = $("d-actions");
    actions.replaceChildren();
    if (!TERMINAL.includes(t.status)) actions.append(cancelButton(t));
    else actions.append(rerunButton(t));
    if (hasControls) actions.append(pauseButton(t.tool));
    for (const q of t.questions) {
      const area = el("textarea", { rows: "3", cols: "50", class: "answer" });
      area.value = JSON.stringify(q.method === "elicitation/create" ? { action: "accept", content: {} } : {}, null, 0);
      actions.append(el("div", {}, [
        el("div", { text: "Question " + q.key + ": " + (q.params.message || q.method) }),
        area,
        el("button", {
          text: "Answer for the user",
          onclick: confirmThen("Answer question " + q.key + " on the user's behalf?", () => {
            const responses = {};
            responses[q.key] = JSON.parse(area.value);
            return call("/tasks/" + encodeURIComponent(id) + "/answer", "POST", { responses: responses });
          }),
        }),
      ]));
    }
    $("d-history").tBodies[0].replaceChildren(...t.history.map((h) => el("tr", {}, [
      el("td", { text: h.at }),
      el("td", { text: h.event === "created" ? "created (" + h.status + ")" : h.status }),
      el("td", { text: h.message || "" }),
      el("td", { text: h.epoch === undefined ? "" : String(h.epoch) }),
      el("td", { text: h.process || "" }),
    ])));
    $("d-body").textContent = JSON.stringify(t, null, 2);
    if (!quiet) d.scrollIntoView({ behavior: "smooth" });
  }

  // The feed: server-sent events read with fetch, which can send the token as a header.
  async function follow() {
    if (feedAbort) feedAbort.abort();
    const abort = new AbortController();
    feedAbort = abort;
    let delay = 500;
    while (!abort.signal.aborted) {
      try {
        const res = await fetch(api + "/events", { headers: { Authorization: "Bearer " + token }, signal: abort.signal, cache: "no-store" });
        if (res.status === 401) return showLogin("The admin token was refused.");
        if (!res.ok || !res.body) throw new Error("feed: " + res.status);
        $("live").className = "dot on";
        $("live").textContent = "live";
        delay = 500;
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            let event = "message";
            let data = "";
            for (const line of block.split("\n")) {
              if (line.startsWith("event:")) event = line.slice(6).trim();
              else if (line.startsWith("data:")) data += line.slice(5).trim();
            }
            if (!data) continue;
            const payload = JSON.parse(data);
            if (event === "task") apply(payload);
            else if (event === "stats") showStats(payload);
            else if (event === "resync") loadLists().catch((e) => notice(e.message));
          }
        }
      } catch (e) {
        if (abort.signal.aborted) return;
      }
      $("live").className = "dot off";
      $("live").textContent = "feed off";
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 10000);
    }
  }

  function showLogin(message) {
    token = null;
    sessionStorage.removeItem("mcp-tasks-admin-token");
    if (feedAbort) feedAbort.abort();
    $("main").hidden = true;
    $("login").hidden = false;
    $("logout").hidden = true;
    notice(message || "");
  }

  async function start() {
    $("login").hidden = true;
    $("logout").hidden = false;
    $("main").hidden = false;
    try {
      showStats(await call("/stats"));
      await loadLists();
      notice("");
    } catch (e) {
      if (e.message !== "unauthorized") notice(e.message);
      return;
    }
    follow();
  }

  $("login").addEventListener("submit", (e) => {
    e.preventDefault();
    token = $("token").value.trim();
    $("token").value = "";
    if (!token) return;
    sessionStorage.setItem("mcp-tasks-admin-token", token);
    start();
  });
  $("logout").addEventListener("click", () => showLogin(""));
  $("filter").addEventListener("submit", (e) => {
    e.preventDefault();
    loadAll(false).catch((err) => notice(err.message));
  });
  $("more").addEventListener("click", () => loadAll(true).catch((err) => notice(err.message)));
  $("d-close").addEventListener("click", () => {
    $("detail").hidden = true;
    delete $("detail").dataset.id;
  });
  // Lists are read again now and then, for what the feed cannot say (expired tasks).
  setInterval(() => {
    if (token) loadLists().catch(() => {});
  }, 30000);

  token = readToken();
  if (token) start();
  else showLogin("");
})();
