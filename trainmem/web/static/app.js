// trainmem serve: the page. Plain JS, no build step. Every edit posts the form to /api/view/<tab>
// (the CLI's --json object plus the HTML and plotly figures the server renders) and redraws.
"use strict";

var ALL = ["estimate", "compare", "doctor"];
// id: DOM name; key: the API's key (the CLI option in snake_case); kind: int | text | select | check | area
var FIELDS = [
  {id: "model_source", kind: "source", tabs: ALL.concat(["plan"]), group: "model"},
  {id: "model_config", key: "model", kind: "area", tabs: ALL.concat(["plan"]), group: "model", ui: "paste_here"},
  {id: "model_other", key: "model", kind: "text", tabs: ALL.concat(["plan"]), group: "model", ui: "model_other"},
  {id: "gpu", kind: "gpu", tabs: ALL, group: "model", ui: "gpu"},
  {id: "gpu_memory", kind: "text", tabs: ALL, group: "model", ui: "gpu_memory"},
  {id: "cluster", kind: "text", tabs: ["plan"], group: "model", ui: "cluster", value: "8xH100-SXM-80G"},
  {id: "global_batch", kind: "int", tabs: ["plan"], group: "model", ui: "global_batch", value: "64"},
  {id: "top", kind: "int", tabs: ["plan"], group: "model", ui: "top", value: "5"},
  {id: "error", kind: "area", tabs: ["doctor"], group: "doctor", ui: "oom_message", big: true},
  {id: "log", kind: "area", tabs: ["doctor"], group: "doctor", ui: "log"},
  {id: "nvidia_smi", kind: "area", tabs: ["doctor"], group: "doctor", ui: "nvidia_smi"},
  {id: "seq_len", kind: "int", tabs: ALL.concat(["plan"]), group: "setup", placeholder: "2048"},
  {id: "micro_batch", kind: "int", tabs: ALL, group: "setup", placeholder: "1"},
  {id: "grad_accum", kind: "int", tabs: ALL, group: "setup", placeholder: "1"},
  {id: "precision", kind: "select", tabs: ALL, group: "setup", choices: "precision"},
  {id: "plan_precision", key: "precision", kind: "select", tabs: ["plan"], group: "setup",
   fixed: ["bf16", "fp16", "fp32", "fp8"], label: "precision", noDefault: true},
  {id: "stack", kind: "select", tabs: ALL, group: "setup", choices: "stack"},
  {id: "engine", kind: "select", tabs: ALL, group: "setup", choices: "engine"},
  {id: "optimizer", kind: "select", tabs: ALL.concat(["plan"]), group: "setup", choices: "optimizer"},
  {id: "recompute", kind: "select", tabs: ALL, group: "setup", choices: "recompute"},
  {id: "zero", kind: "int", tabs: ALL, group: "setup"},
  {id: "offload", kind: "select", tabs: ALL, group: "setup", choices: "offload"},
  {id: "gpus", kind: "int", tabs: ALL, group: "par", placeholder: "1"},
  {id: "tp", kind: "int", tabs: ALL, group: "par", placeholder: "1"},
  {id: "pp", kind: "int", tabs: ALL, group: "par", placeholder: "1"},
  {id: "dp", kind: "int", tabs: ALL, group: "more"},
  {id: "cp", kind: "int", tabs: ALL, group: "more", placeholder: "1"},
  {id: "ep", kind: "int", tabs: ALL, group: "more", placeholder: "1"},
  {id: "vpp", kind: "int", tabs: ALL, group: "more", placeholder: "1"},
  {id: "sp", kind: "check", tabs: ALL, group: "more"},
  {id: "attn", kind: "select", tabs: ALL.concat(["plan"]), group: "more", choices: "attn"},
  {id: "loop", kind: "select", tabs: ALL, group: "more", choices: "loop"},
  {id: "loss", kind: "select", tabs: ALL, group: "more", choices: "loss"},
  {id: "loss_chunks", kind: "int", tabs: ALL, group: "more"},
  {id: "lora_rank", kind: "int", tabs: ALL.concat(["plan"]), group: "more", placeholder: "0"},
  {id: "lora_targets", kind: "text", tabs: ALL.concat(["plan"]), group: "more"},
  {id: "qlora", kind: "check", tabs: ALL.concat(["plan"]), group: "more"},
  {id: "fix", kind: "text", tabs: ["plan"], group: "more", ui: "fix"}
];
var GROUPS = [["doctor", null], ["model", "model"], ["setup", "setup"], ["par", "parallelism"], ["more", "more"]];
var FLAG_LABELS = {};

var state = {tab: "estimate", lang: "en", ui: {}, meta: null, seq: 0, timer: null, lastEdited: null};

function $(sel, root) { return (root || document).querySelector(sel); }
function $all(sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); }
function el(tag, attrs, children) {
  var e = document.createElement(tag);
  Object.keys(attrs || {}).forEach(function (k) { if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, attrs[k]); });
  (children || []).forEach(function (c) { e.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
  return e;
}
function keyOf(f) { return f.key || f.id; }
function flagOf(f) { return "--" + keyOf(f).replace(/_/g, "-"); }
function label(key, fallback) { return state.ui[key] || fallback || key; }

function control(f) {
  var m = state.meta, attrs = {name: f.id, id: "f-" + f.id, "data-testid": "field-" + f.id};
  if (f.kind === "source") {
    var s = el("select", attrs);
    m.models.forEach(function (x) { s.appendChild(el("option", {value: x.name}, [x.name + " (" + (x.n_params / 1e9).toFixed(2) + " B)"])); });
    s.appendChild(el("option", {value: "__other", "data-ui": "model_other"}, [label("model_other")]));
    s.appendChild(el("option", {value: "__paste", "data-ui": "model_paste"}, [label("model_paste")]));
    s.value = "llama-3.1-8b";
    return s;
  }
  if (f.kind === "gpu") {
    var g = el("select", attrs);
    m.gpus.forEach(function (x) { g.appendChild(el("option", {value: x.name}, [x.name + " · " + (x.memory_bytes / 1073741824).toFixed(1) + " GiB"])); });
    g.value = "H100-SXM-80G";
    return g;
  }
  if (f.kind === "select") {
    var c = el("select", attrs);
    if (!f.noDefault) c.appendChild(el("option", {value: "", "data-ui": "default"}, [label("default")]));
    (f.fixed || m.choices[f.choices] || []).forEach(function (v) { c.appendChild(el("option", {value: v}, [v])); });
    return c;
  }
  if (f.kind === "check") { attrs.type = "checkbox"; return el("input", attrs); }
  if (f.kind === "area") { attrs.rows = f.big ? 8 : 4; attrs.spellcheck = "false"; return el("textarea", attrs); }
  attrs.type = "text";
  attrs.inputmode = f.kind === "int" ? "numeric" : "text";
  attrs.placeholder = f.placeholder || "";
  var i = el("input", attrs);
  if (f.value) i.value = f.value;
  return i;
}

function buildForm() {
  var form = $("#form");
  form.innerHTML = "";
  GROUPS.forEach(function (grp) {
    var box = grp[0] === "more" ? el("details", {}) : el("fieldset", {"data-group": grp[0]});
    if (grp[0] === "more") box.appendChild(el("summary", {"data-ui": "more"}, [label("more")]));
    else if (grp[1]) box.appendChild(el("legend", {"data-ui": grp[1]}, [label(grp[1])]));
    FIELDS.filter(function (f) { return f.group === grp[0]; }).forEach(function (f) {
      var name = f.ui ? label(f.ui) : label("field." + (f.label || keyOf(f)), keyOf(f));
      var lbl = el("span", {"class": "lbl", "data-ui": f.ui || ("field." + (f.label || keyOf(f)))}, [name]);
      var head = el("span", {"class": "lbl-row"}, [lbl]);
      if (f.kind !== "source" && f.kind !== "area") head.appendChild(el("code", {}, [flagOf(f)]));
      if (f.kind === "source") lbl.setAttribute("data-ui", "model");
      if (f.kind === "source") lbl.textContent = label("model");
      var wide = ["source", "gpu", "area", "text"].indexOf(f.kind) >= 0;
      var wrap = el("label", {"class": "field" + (wide ? " wide" : ""), "data-field": f.id, "data-tabs": f.tabs.join(" ")},
                    [head, control(f), el("span", {"class": "field-error", "data-error-for": f.id, "data-testid": "error-" + f.id})]);
      box.appendChild(wrap);
    });
    form.appendChild(box);
  });
  form.addEventListener("input", onEdit);
  form.addEventListener("change", onEdit);
}

function relabel() {
  $all("[data-ui]").forEach(function (e) { var k = e.getAttribute("data-ui"); if (state.ui[k]) e.textContent = state.ui[k]; });
  document.documentElement.lang = state.lang === "zh" ? "zh-CN" : "en";
}

function showFields() {
  var src = $("#f-model_source").value;
  $all(".field").forEach(function (w) {
    var id = w.getAttribute("data-field"), on = w.getAttribute("data-tabs").split(" ").indexOf(state.tab) >= 0;
    if (id === "model_config") on = on && src === "__paste";
    if (id === "model_other") on = on && src === "__other";
    w.style.display = on ? "" : "none";
  });
  // a blank field means the command's default: show this tab's (the CLI's: plan --seq-len 4096, estimate 2048)
  var defaults = (state.meta.defaults || {})[state.tab] || {};
  FIELDS.forEach(function (f) {
    var input = $("#f-" + f.id);
    if (!input || input.tagName !== "INPUT" || input.type !== "text") return;
    var d = defaults[keyOf(f)];
    input.placeholder = d !== undefined && d !== null ? String(d) : (f.placeholder || "");
  });
  $all("#form fieldset, #form details").forEach(function (b) {
    var shown = $all(".field", b).some(function (w) { return w.style.display !== "none"; });
    b.style.display = shown ? "" : "none";
  });
}

function fieldValue(f) {
  var e = $("#f-" + f.id);
  if (f.kind === "check") return e.checked ? true : undefined;
  var v = e.value;
  if (f.kind === "int") { v = v.trim(); if (v === "") return undefined; return /^-?\d+$/.test(v) ? Number(v) : v; }
  if (v === "") return undefined;
  return v;
}

function body() {
  var b = {lang: state.lang}, src = $("#f-model_source").value, problems = {};
  FIELDS.forEach(function (f) {
    if (f.tabs.indexOf(state.tab) < 0 || f.kind === "source" || keyOf(f) === "model") return;
    var v = fieldValue(f);
    if (v !== undefined) b[keyOf(f)] = v;
  });
  if (src === "__paste") {
    try { b.model = JSON.parse($("#f-model_config").value); }
    catch (err) { problems.model_config = label("config_not_json"); }
  } else if (src === "__other") { b.model = $("#f-model_other").value.trim(); }
  else { b.model = src; }
  return {body: b, problems: problems};
}

function clearErrors() {
  $all(".field.invalid").forEach(function (w) { w.classList.remove("invalid"); });
  $all(".field-error").forEach(function (e) { e.textContent = ""; });
  $("#global-error").textContent = "";
}

function showError(id, msg) {
  var w = $('.field[data-field="' + id + '"]');
  if (!w || w.style.display === "none") { $("#global-error").textContent = msg; return; }
  w.classList.add("invalid");
  $('[data-error-for="' + id + '"]').textContent = msg;
}

// The field a one-line error names: the one just edited if the line mentions it, else the first named.
function fieldOf(msg) {
  var src = $("#f-model_source").value, best = null, bestAt = Infinity;
  var modelField = src === "__paste" ? "model_config" : (src === "__other" ? "model_other" : "model_source");
  if (/^(unknown model|model:|config\.json|cannot read|未知模型)/.test(msg) || msg.indexOf("config.json") >= 0) return modelField;
  FIELDS.forEach(function (f) {
    if (f.tabs.indexOf(state.tab) < 0) return;
    var k = keyOf(f), kebab = k.replace(/_/g, "-"), pats = ["--" + kebab, kebab + ":", kebab + "：", k + "(", kebab + "(", k + ":"];
    pats.forEach(function (p) {
      var at = msg.indexOf(p);
      if (at < 0 || (at > 0 && /[A-Za-z_-]/.test(msg.charAt(at - 1)) && p.charAt(0) !== "-")) return;
      if (f.id === state.lastEdited) at = -1;
      if (at < bestAt) { bestAt = at; best = f.id; }
    });
  });
  return best;
}

function ensureChart(id, order) {
  var box = $("#charts"), div = $("#fig-" + id);
  if (!div) { div = el("div", {"class": "chart", id: "fig-" + id, "data-testid": "chart-" + id}); }
  if (box.children[order] !== div) box.insertBefore(div, box.children[order] || null);
  return div;
}

// PNG (plotly's camera button) and SVG export, both drawn in the browser: nothing leaves the machine
var SVG_BUTTON = {name: "svg", title: "SVG", icon: Plotly.Icons.disk,
                  click: function (gd) { Plotly.downloadImage(gd, {format: "svg", filename: gd.id}); }};
var PLOT_CONFIG = {responsive: true, displaylogo: false, modeBarButtonsToAdd: [SVG_BUTTON],
                   toImageButtonOptions: {format: "png", scale: 2}};

function draw(resp) {
  $("#summary").innerHTML = resp.summary || "";
  $("#result").innerHTML = resp.html || "";
  $("#out").classList.remove("stale");
  var ids = Object.keys(resp.figures || {});
  $all("#charts > .chart").forEach(function (d) { if (ids.indexOf(d.id.slice(4)) < 0) { Plotly.purge(d); d.remove(); } });
  ids.forEach(function (id, i) {
    var fig = resp.figures[id], div = ensureChart(id, i), layout = fig.layout;
    Plotly.react(div, fig.data, layout, PLOT_CONFIG);
  });
  document.body.setAttribute("data-updated", String(state.seq));
}

function update() {
  state.timer = null;  // (tests wait for no pending edit and the latest request answered: state.timer, seq)
  var b = body(), seq = ++state.seq;
  clearErrors();
  if (Object.keys(b.problems).length) {
    Object.keys(b.problems).forEach(function (k) { showError(k, b.problems[k]); });
    document.body.setAttribute("data-error", String(seq));
    return;
  }
  document.body.classList.add("busy");
  $("#status").textContent = label("working");
  fetch("/api/view/" + state.tab, {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(b.body)})
    .then(function (r) { return r.json().then(function (j) { return {ok: r.ok, j: j}; }); })
    .then(function (res) {
      if (seq !== state.seq) return;
      document.body.classList.remove("busy");
      $("#status").textContent = "";
      if (!res.ok) {
        var msg = res.j.error || "error", at = fieldOf(msg);
        if (at) showError(at, msg); else $("#global-error").textContent = msg;
        $("#out").classList.add("stale");
        document.body.setAttribute("data-error", String(seq));
        return;
      }
      draw(res.j);
    })
    .catch(function (err) { if (seq === state.seq) { $("#global-error").textContent = String(err); } });
}

function onEdit(ev) {
  var t = ev.target;
  if (t && t.name) state.lastEdited = t.name;
  if (t && t.name === "model_source") showFields();
  clearTimeout(state.timer);
  state.timer = setTimeout(update, ev.type === "change" ? 0 : 150);
}

function loadUi(lang) {
  return fetch("/api/ui?lang=" + encodeURIComponent(lang)).then(function (r) { return r.json(); })
    .then(function (ui) { state.ui = ui; state.lang = lang; relabel(); });
}

function selectTab(tab) {
  state.tab = tab;
  $all(".tabs button").forEach(function (b) { b.classList.toggle("active", b.getAttribute("data-tab") === tab); });
  if (tab === "doctor" && !state.meta.doctor) { $("#global-error").textContent = label("doctor_missing"); }
  showFields();
  $("#result").innerHTML = "";
  $("#summary").innerHTML = "";
  $all("#charts > .chart").forEach(function (d) { Plotly.purge(d); d.remove(); });
  update();
}

function init() {
  fetch("/api/meta").then(function (r) { return r.json(); }).then(function (meta) {
    state.meta = meta;
    $("#lang").value = meta.lang || "en";
    return loadUi(meta.lang || "en");
  }).then(function () {
    buildForm();
    relabel();
    showFields();
    $all(".tabs button").forEach(function (b) { b.addEventListener("click", function () { selectTab(b.getAttribute("data-tab")); }); });
    $("#lang").addEventListener("change", function () { loadUi($("#lang").value).then(update); });
    document.body.setAttribute("data-ready", "1");
    update();
  });
}

document.addEventListener("DOMContentLoaded", init);
