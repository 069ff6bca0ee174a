// swerollout viewer. Every piece of rollout data reaches the DOM as text (textContent /
// createTextNode), never as markup: model output is hostile input.
"use strict";
(function () {
  const CHUNK = 2000;          // tokens rendered per step of the token view
  const ROW_CHUNK = 150;       // batch table rows rendered per step
  const FOLD_CHARS = 2500;     // longer message texts start folded
  const FOLD_LINES = 40;
  const embedded = document.getElementById("swerollout-data");
  const DATA = embedded ? JSON.parse(embedded.textContent) : null;
  const cache = {};

  // --- DOM helpers ---------------------------------------------------------------------
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null) continue;
        if (k === "class") el.className = v;
        else if (k === "text") el.textContent = v;
        else if (k === "href") el.setAttribute("href", v);
        else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
        else el.setAttribute(k, String(v));
      }
    }
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      el.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
    }
    return el;
  }
  const fmt = (x, d = 1) => (x === null || x === undefined ? "-" : Number(x).toFixed(d));
  const pct = (x) => (100 * x).toFixed(1) + "%";
  const secs = (s) => (s === null || s === undefined ? "-" : s < 90 ? s.toFixed(1) + " s" : (s / 60).toFixed(1) + " min");
  const rolloutHref = (name) => "#r/" + encodeURIComponent(name);

  // --- data access: embedded (report file) or served (swerollout view) -------------------
  async function getBatch() {
    if (DATA) return DATA.batch;
    if (!cache.batch) cache.batch = fetch("api/batch").then(ok);
    return cache.batch;
  }
  async function getRollout(name) {
    if (DATA) {
      const r = DATA.rollouts[name];
      if (!r) throw new Error("no rollout named " + name + " in this report");
      return r;
    }
    const key = "r:" + name;
    if (!cache[key]) cache[key] = fetch("api/rollout/" + encodeURIComponent(name)).then(ok);
    return cache[key];
  }
  async function ok(response) {
    if (!response.ok) throw new Error(response.status + " " + (await response.text()));
    return response.json();
  }

  // --- routing -----------------------------------------------------------------------------
  const main = document.getElementById("main");
  const where = document.getElementById("where");
  async function route() {
    const hash = location.hash.slice(1);
    main.replaceChildren(h("p", { class: "muted", text: "loading…" }));
    try {
      if (hash.startsWith("r/")) {
        await rolloutPage(decodeURIComponent(hash.slice(2)));
      } else if (hash.startsWith("c/")) {
        const [a, b] = hash.slice(2).split("/").map(decodeURIComponent);
        await comparePage(a, b);
      } else {
        await batchPage();
      }
    } catch (err) {
      main.replaceChildren(h("p", { class: "error", "data-testid": "error", text: String(err && err.message || err) }));
    }
  }
  window.addEventListener("hashchange", route);

  // --- batch page --------------------------------------------------------------------------
  function bars(counts, total, testPrefix) {
    const max = Math.max(1, ...Object.values(counts));
    return h("div", { class: "bars" }, ...Object.entries(counts).map(([k, n]) => {
      const fill = h("div", { class: "fill" });
      fill.style.width = (100 * n / max).toFixed(1) + "%";
      const label = k === "" ? "(empty)" : k;  // e.g. a server that reports an empty weight version
      return h("div", { class: "bar" }, h("span", { class: "name", title: label, text: label }), h("div", null, fill),
        h("span", { class: "num", "data-testid": testPrefix + k, text: String(n) + (total ? "" : "") }));
    }));
  }
  function histogram(title, hist, unit) {
    const max = Math.max(1, ...hist.counts);
    const box = h("div", { class: "hist" }, ...hist.counts.map((n) => {
      const d = h("div", { title: String(n) });
      d.style.height = (100 * n / max).toFixed(1) + "%";
      return d;
    }));
    return h("div", { class: "panel" }, h("h2", { text: title }), box,
      h("div", { class: "hist-axis" }, h("span", { text: fmt(hist.lo, 0) + unit }), h("span", { text: fmt(hist.hi, 0) + unit })));
  }
  function card(label, value, testid) {
    return h("div", { class: "card" }, h("div", { class: "v", "data-testid": testid, text: String(value) }), h("div", { class: "k", text: label }));
  }

  async function batchPage() {
    const b = await getBatch();
    document.title = "swerollout · " + b.batches.join(", ");
    where.textContent = b.batches.join(", ") + " — " + b.source;
    const rows = b.rollouts;
    const phaseTable = h("table", null,
      h("tr", null, h("th", { text: "phase" }), h("th", { class: "num", text: "mean" }), h("th", { class: "num", text: "median" }), h("th", { class: "num", text: "max" })),
      ...Object.entries(b.phases).map(([p, s]) => h("tr", null, h("td", { text: p }), h("td", { class: "num", text: secs(s.mean) }),
        h("td", { class: "num", text: secs(s.median) }), h("td", { class: "num", text: secs(s.max) }))));

    const tasks = [...new Set(rows.map((r) => r.instance_id))].sort();
    const exits = Object.keys(b.exit_statuses);
    const sel = (id, label, options) => h("label", null, label + " ",
      h("select", { id, "data-testid": id }, h("option", { value: "", text: "all" }), ...options.map(([v, t]) => h("option", { value: v, text: t }))));
    const filters = h("div", { class: "filters" },
      sel("f-task", "task", tasks.map((t) => [t, t])),
      sel("f-exit", "exit status", exits.map((e) => [e, e])),
      sel("f-reward", "reward", [["resolved", "resolved"], ["positive", "> 0"], ["zero", "= 0"], ["none", "no reward"]]),
      h("span", { class: "muted", "data-testid": "shown" }));
    const tbody = h("tbody");
    const table = h("table", { class: "rollouts", "data-testid": "rollouts" },
      h("thead", null, h("tr", null, ...["task / group", "member", "status", "exit", "reward", "turns", "tokens", "trained", "aborts", "duration", ""].map(
        (t, i) => h("th", { class: i >= 4 && i <= 9 ? "num" : "", text: t })))), tbody);

    let observer = null;
    function groupRow(members) {
      const first = members[0];
      const rewards = members.map((m) => (m.reward === null ? "-" : fmt(m.reward, 2))).join(", ");
      return h("tr", { class: "group-row" }, h("td", { colspan: 11 },
        h("b", { text: first.instance_id }), " · group " + first.sample + (b.batches.length > 1 ? " of " + first.batch : "") +
        " · rewards [" + rewards + "]"));
    }
    function rolloutRow(r, members) {
      const cls = r.resolved ? "ok" : r.status === "failed" ? "bad" : "";
      const other = members.find((m) => m.name !== r.name);
      return h("tr", { class: "rollout-row", "data-name": r.name },
        h("td", null, h("a", { href: rolloutHref(r.name), text: r.name })),
        h("td", { text: String(r.member) }),
        h("td", { class: r.status === "failed" ? "bad" : r.status === "aborted" ? "warn" : "", text: r.status }),
        h("td", { text: r.exit_status || "-" }),
        h("td", { class: "num " + cls, text: r.reward === null ? "-" : fmt(r.reward, 2) }),
        h("td", { class: "num", text: String(r.turns) }),
        h("td", { class: "num", text: String(r.tokens) }),
        h("td", { class: "num", text: String(r.sampled) }),
        h("td", { class: "num", text: r.aborts ? r.aborts + (r.resumes ? " / " + r.resumes + " resumed" : "") : "" }),
        h("td", { class: "num", text: secs(r.duration) }),
        h("td", null, other ? h("a", { href: "#c/" + encodeURIComponent(r.name) + "/" + encodeURIComponent(other.name), text: "compare" }) : null));
    }
    function render() {
      const ft = document.getElementById("f-task").value, fe = document.getElementById("f-exit").value, fr = document.getElementById("f-reward").value;
      const keep = rows.filter((r) => (!ft || r.instance_id === ft) && (!fe || (r.exit_status || "(none)") === fe) &&
        (!fr || (fr === "resolved" ? r.resolved : fr === "positive" ? r.reward > 0 : fr === "zero" ? r.reward === 0 : r.reward === null)));
      // Grouped by task, then GRPO group (batch, sample).
      const groups = new Map();
      for (const r of keep) {
        const key = r.instance_id + "\u0000" + r.batch + "\u0000" + r.sample;
        if (!groups.has(key)) groups.set(key, []);
        groups.get(key).push(r);
      }
      const keys = [...groups.keys()].sort();
      // Rows are drawn a few hundred at a time as the table scrolls into view: laying out
      // thousands of rows at once takes seconds.
      const pending = [];
      for (const key of keys) {
        const members = groups.get(key).sort((x, y) => x.member - y.member);
        pending.push(() => groupRow(members));
        for (const r of members) pending.push(() => rolloutRow(r, members));
      }
      let next = 0;
      const more = h("tr", { class: "more" }, h("td", { colspan: 11, class: "muted" }));
      function drawMore() {
        const frag = document.createDocumentFragment();
        const end = Math.min(pending.length, next + ROW_CHUNK);
        for (; next < end; next++) frag.append(pending[next]());
        more.before(frag);
        more.firstChild.textContent = next < pending.length ? "scroll for more…" : "";
      }
      if (observer) observer.disconnect();
      tbody.replaceChildren(more);
      drawMore();
      observer = new IntersectionObserver((entries) => { if (entries.some((e) => e.isIntersecting) && next < pending.length) drawMore(); }, { rootMargin: "800px" });
      observer.observe(more);
      document.querySelector("[data-testid=shown]").textContent = "showing " + keep.length + " of " + rows.length + " rollouts";
    }

    main.replaceChildren(
      h("div", { class: "cards" },
        card("rollouts", b.total, "total"),
        card("resolved", b.resolved, "resolved"),
        card("resolved rate", pct(b.resolved_rate), "resolved-rate"),
        card("aborted (at least once)", b.aborted, "aborted"),
        card("resumed", b.resumed, "resumed"),
        card("replayed into a new pod", b.replayed, "replayed")),
      h("div", { class: "grid" },
        h("div", { class: "panel" }, h("h2", { text: "exit status" }), bars(b.exit_statuses, b.total, "exit-")),
        h("div", { class: "panel" }, h("h2", { text: "trainer status" }), bars(b.statuses, b.total, "status-")),
        h("div", { class: "panel" }, h("h2", { text: "weight versions (trained tokens)" }),
          Object.keys(b.versions).length ? bars(b.versions, 0, "version-") : h("p", { class: "muted", text: "no trained tokens" })),
        h("div", { class: "panel" }, h("h2", { text: "time per phase" }), phaseTable)),
      h("div", { class: "grid" },
        histogram("turns", b.histograms.turns, ""),
        histogram("tokens", b.histograms.tokens, ""),
        histogram("duration", b.histograms.duration, " s")),
      h("h2", { text: "rollouts by task and group" }), filters, table);
    for (const id of ["f-task", "f-exit", "f-reward"]) document.getElementById(id).addEventListener("change", render);
    render();
  }

  // --- rollout page ---------------------------------------------------------------------
  function folded(text, cls) {
    const lines = text.split("\n").length;
    if (text.length <= FOLD_CHARS && lines <= FOLD_LINES) return h("pre", { class: cls, text });
    // Long observations start folded; their text is only put into the page when opened.
    const body = h("pre", { class: cls });
    const details = h("details", null, h("summary", { text: lines + " lines, " + text.length + " characters — " + text.slice(0, 120).replace(/\s+/g, " ") + "…" }), body);
    details.addEventListener("toggle", () => { if (details.open && !body.textContent) body.textContent = text; });
    return details;
  }
  function contentNodes(content) {
    if (content === null || content === undefined) return [];
    if (typeof content === "string") return [folded(content, "text")];
    if (!Array.isArray(content)) return [folded(JSON.stringify(content, null, 2), "text")];
    const out = [];
    for (const part of content) {
      if (part && part.type === "text") out.push(folded(String(part.text || ""), "text"));
      else if (part && part.type === "image_url") {
        const url = String((part.image_url && part.image_url.url) || part.image_url || "");
        // Inline images only: fetching a remote one would leave this machine.
        if (/^data:image\/(png|jpeg|gif|webp);base64,/i.test(url)) out.push(h("img", { src: url, alt: "problem statement image" }));
        else out.push(h("div", { class: "img-note", text: "image (not loaded, the page stays offline): " + url.slice(0, 300) }));
      } else out.push(folded(JSON.stringify(part, null, 2), "text"));
    }
    return out;
  }
  function messageNode(m, i) {
    const role = String(m.role || "?");
    const node = h("div", { class: "msg " + role.replace(/[^a-z]/g, ""), "data-testid": "message" },
      h("div", { class: "role", text: "#" + i + " " + role + (m.name ? " (" + m.name + ")" : "") + (m.tool_call_id ? " · " + m.tool_call_id : "") }),
      ...contentNodes(m.content));
    for (const call of m.tool_calls || []) {
      const fn = call.function || {};
      let args = fn.arguments;
      try { args = JSON.stringify(typeof args === "string" ? JSON.parse(args) : args, null, 2); } catch (e) { args = String(args); }
      node.append(h("div", { class: "call" }, h("span", { class: "fn", text: "\u2192 " + String(fn.name || "?") + "()" }), folded(String(args || ""), "text")));
    }
    return node;
  }
  function diffNode(patch) {
    if (!patch) return h("p", { class: "muted", text: "no patch submitted" });
    const pre = h("pre", { class: "diff", "data-testid": "patch" });
    for (const line of patch.split("\n")) {
      const cls = line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ") ? "file"
        : line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "";
      pre.append(cls ? h("span", { class: cls, text: line }) : document.createTextNode(line + "\n"));
    }
    return pre;
  }
  function reportNode(r) {
    if (!r.report) return h("p", { class: "muted", text: "no eval report in this record" + (r.reward === null ? "" : " (reward " + fmt(r.reward, 2) + ")") });
    const rep = r.report;
    const table = h("table", { "data-testid": "eval-tests" }, h("tr", null, h("th", { text: "group" }), h("th", { text: "test" }), h("th", { text: "outcome" })));
    for (const group of ["fail_to_pass", "pass_to_pass"]) {
      const g = rep[group] || {};
      for (const [list, outcome, cls] of [[g.success || [], "passed", "ok"], [g.failure || [], "failed", "bad"]]) {
        for (const test of list) {
          table.append(h("tr", { class: "eval-test" }, h("td", { text: group.toUpperCase() }), h("td", { text: String(test) }), h("td", { class: cls, text: outcome })));
        }
      }
    }
    return h("div", null,
      h("div", { class: "kv" },
        h("span", { class: "k", text: "resolved" }), h("span", { class: rep.resolved ? "ok" : "bad", text: String(!!rep.resolved) }),
        h("span", { class: "k", text: "graded" }), h("span", { text: String(rep.graded !== false) }),
        h("span", { class: "k", text: "grader" }), h("span", { text: String(rep.backend || "-") + (rep.parser ? " / " + rep.parser : "") }),
        h("span", { class: "k", text: "message" }), h("span", { text: String(rep.message || "") })),
      table,
      rep.test_output ? h("details", null, h("summary", { text: "test output (tail)" }), h("pre", { text: String(rep.test_output) })) : null);
  }

  const tip = h("div", { id: "tip" });
  document.body.append(tip);

  function tokenView(r) {
    const t = r.token_view;
    const n = t.ids.length;
    const marksAt = new Map();
    for (const m of t.marks) { if (!marksAt.has(m.at)) marksAt.set(m.at, []); marksAt.get(m.at).push(m); }
    let heat = false;
    let rendered = 0;
    const box = h("div", { class: "tokens", "data-testid": "tokens" });
    const sentinel = h("div", { class: "sentinel" });
    const status = h("span", { class: "muted", "data-testid": "tokens-shown" });
    const show = (piece) => (piece === "" ? "\u2205" : piece.replace(/\n/g, "\u21b5\n"));
    function chunk(upto) {
      const frag = document.createDocumentFragment();
      const end = Math.min(n, upto);
      for (let i = rendered; i < end; i++) {
        const ms = marksAt.get(i);
        if (ms) for (const m of ms) frag.append(h("span", { class: "mk " + m.kind, "data-testid": "mark-" + m.kind, text: m.label }));
        const span = document.createElement("span");
        span.className = "tk " + (i < t.prompt ? "prompt m0" : t.mask[i] ? "m1" : "m0");
        span.dataset.i = i;
        span.textContent = t.pieces ? show(t.pieces[i]) : "[" + t.ids[i] + "]";
        if (heat && t.mask[i]) span.style.background = heatColor(t.logprobs[i]);
        frag.append(span);
      }
      if (end === n) for (const m of marksAt.get(n) || []) frag.append(h("span", { class: "mk " + m.kind, "data-testid": "mark-" + m.kind, text: m.label }));
      rendered = end;
      sentinel.before(frag);
      status.textContent = "showing " + rendered + " of " + n + " tokens";
      sentinel.textContent = rendered < n ? "scroll for more…" : "";
    }
    function heatColor(lp) {
      const p = Math.exp(Math.max(-20, lp)); // probability of the sampled token
      return "hsl(" + Math.round(120 * p) + ", 75%, 82%)";
    }
    function redraw() {
      const upto = rendered;
      box.replaceChildren(sentinel);
      rendered = 0;
      chunk(upto);
    }
    box.append(sentinel);
    chunk(CHUNK);
    const io = new IntersectionObserver((entries) => { if (entries.some((e) => e.isIntersecting) && rendered < n) chunk(rendered + CHUNK); }, { root: box, rootMargin: "600px" });
    io.observe(sentinel);
    box.addEventListener("mouseover", (ev) => {
      const el = ev.target;
      if (!(el instanceof HTMLElement) || !el.classList.contains("tk")) return;
      const i = Number(el.dataset.i);
      const v = t.version_table[t.versions[i]];
      tip.textContent = "#" + i + "  id " + t.ids[i] + "\n" + JSON.stringify(t.pieces ? t.pieces[i] : "") + "\n" +
        (i < t.prompt ? "prompt" : t.mask[i] ? "trained (loss mask 1)\nlogprob " + t.logprobs[i] + "\nweights " + JSON.stringify(v) : "environment (loss mask 0)");
      tip.style.display = "block";
      const rect = el.getBoundingClientRect();
      tip.style.left = Math.min(window.innerWidth - 430, rect.left) + "px";
      tip.style.top = (rect.bottom + 6) + "px";
    });
    box.addEventListener("mouseleave", () => { tip.style.display = "none"; });
    const heatBox = h("input", { type: "checkbox", "data-testid": "heat" });
    heatBox.addEventListener("change", () => { heat = heatBox.checked; redraw(); });
    const all = h("button", { "data-testid": "show-all", text: "render all" });
    all.addEventListener("click", () => chunk(n));
    return h("div", null,
      h("div", { class: "legend" },
        h("span", { class: "tk prompt", text: "prompt" }), h("span", { class: "tk m0", text: "environment (mask 0)" }),
        h("span", { class: "tk m1", text: "trained (mask 1)" }), h("span", { class: "mk version", text: "weight version change" }),
        h("span", { class: "mk abort", text: "abort" }), h("span", { class: "mk resume", text: "resume" }),
        h("label", null, heatBox, " logprob heat"), all, status),
      t.tokenizer_error ? h("p", { class: "error", text: t.tokenizer_error }) : null,
      box);
  }

  function summaryNode(r) {
    const kv = h("div", { class: "kv", "data-testid": "summary" });
    const add = (k, v, cls) => kv.append(h("span", { class: "k", text: k }), h("span", { class: cls || "", text: String(v) }));
    add("task", r.instance_id); add("batch / group / member", r.batch + " / " + r.sample + " / " + r.member);
    add("status", r.status + " (phase " + r.phase + ")"); add("exit status", r.exit_status || "-");
    add("reward", r.reward === null ? "-" : fmt(r.reward, 2), r.resolved ? "ok" : "bad");
    add("turns", r.turns); add("tokens", r.tokens + " (" + r.sampled + " trained)");
    add("aborts / resumes", r.aborts + " / " + r.resumes); add("pods", r.attempts);
    add("weights", Object.entries(r.versions).map(([v, c]) => (v === "" ? "(empty)" : v) + ": " + c).join(", ") || "-");
    add("tokenizer", r.tokenizer || "-");
    add("time per phase", Object.entries(r.phases).map(([p, s]) => p + " " + secs(s)).join(", ") || "-");
    return kv;
  }

  function rolloutPanel(r, withTokens) {
    return h("div", null,
      summaryNode(r),
      h("h2", { text: "conversation (" + r.messages.length + " messages)" }),
      h("div", { "data-testid": "conversation" }, ...r.messages.map(messageNode)),
      h("h2", { text: "patch" }), diffNode(r.submission),
      h("h2", { text: "eval report" }), reportNode(r),
      withTokens ? h("h2", { text: "tokens (" + r.tokens + ")" }) : null,
      withTokens ? tokenView(r) : null);
  }

  async function rolloutPage(name) {
    const r = await getRollout(name);
    document.title = "swerollout · " + r.name;
    where.textContent = r.name;
    const nav = h("p", null, h("a", { href: "#", text: "← batch" }),
      ...r.group.map((other) => h("span", null, " · ", h("a", { href: "#c/" + encodeURIComponent(r.name) + "/" + encodeURIComponent(other), text: "side by side with " + other }))));
    main.replaceChildren(h("h2", { "data-testid": "rollout-name", text: r.name }), nav, rolloutPanel(r, true));
  }

  async function comparePage(a, b) {
    const [ra, rb] = await Promise.all([getRollout(a), getRollout(b)]);
    document.title = "swerollout · " + a + " vs " + b;
    where.textContent = a + " vs " + b;
    const col = (r) => h("section", { "data-testid": "side" }, h("h2", null, h("a", { href: rolloutHref(r.name), text: r.name })), rolloutPanel(r, true));
    main.replaceChildren(h("p", null, h("a", { href: "#", text: "← batch" })), h("div", { class: "side" }, col(ra), col(rb)));
  }

  route();
})();
