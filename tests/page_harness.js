// Runs serve's chat page (its inline script) in Node against a live server, on a DOM stand-in just large enough
// for it, and prints what the page shows: each turn's class and text, and the conversation it keeps.
//   [THINK=1] node tests/page_harness.js BASE_URL PAGE_SCRIPT_FILE MESSAGE [MESSAGE ...]
//     (a MESSAGE of --retry clicks the last answer's retry button; --reload loads the page anew in the same tab;
//     --toggle-think clicks the "think first" box; --set ID=VALUE types VALUE into the settings field ID)
//   node tests/page_harness.js BASE_URL PAGE_SCRIPT_FILE --render ANSWER_TEXT
//   node tests/page_harness.js BASE_URL PAGE_SCRIPT_FILE --block BLOCK_VIEW_JSON
//   node tests/page_harness.js BASE_URL PAGE_SCRIPT_FILE --stream ANSWER_TEXT STEP
//     (the answer streamed STEP characters a delta: where the page's drawing differs from a whole render)
// Node's own fetch, streams, TextDecoder and AbortController are the browser's for this purpose.
"use strict";
const fs = require("fs");
const [base, scriptFile, ...toSend] = process.argv.slice(2);

class Element {
  constructor(tag, id) {
    this.tag = tag; this.id = id; this.children = []; this.listeners = {};
    this._text = ""; this.className = ""; this.hidden = false; this.open = false; this.value = "";
    this.checked = false; this.style = {};
  }
  get textContent() { return this._text + this.children.map((c) => c.textContent).join(""); }
  set textContent(v) { this._text = String(v); this.children = []; }
  append(...nodes) { nodes.forEach((n) => this.appendChild(n)); }
  appendChild(node) { this.children.push(node); node.parent = this; return node; }
  remove() { if (this.parent) this.parent.children = this.parent.children.filter((c) => c !== this); }
  addEventListener(kind, fn) { (this.listeners[kind] = this.listeners[kind] || []).push(fn); }
  dispatch(kind, event = {}) {
    const e = { preventDefault() {}, ...event };
    for (const fn of this.listeners[kind] || []) fn(e);
  }
  requestSubmit() { this.dispatch("submit"); }
  focus() {}
  get scrollHeight() { return 0; }
}

const byId = {};
const storage = new Map();  // (this tab's sessionStorage: kept across a reload; CHAT=JSON: what it holds at first)
if (process.env.CHAT) storage.set("clover-chat", process.env.CHAT);
globalThis.document = {
  title: "", getElementById: (id) => byId[id], createElement: (tag) => new Element(tag),
  createTextNode: (text) => { const node = new Element("#text"); node.textContent = text; return node; },
};
globalThis.navigator = { clipboard: { writeText: async () => {} } };  // (a secure page's: the copy buttons show)
globalThis.sessionStorage = { getItem: (k) => storage.get(k) ?? null, setItem: (k, v) => storage.set(k, v) };
const nodeFetch = globalThis.fetch, asked = [];  // (asked: the bodies the page posted)
globalThis.fetch = (path, options) => {  // the page asks its own origin
  if (options && options.body) asked.push(JSON.parse(options.body));
  return nodeFetch(base + path, options);
};

const script = fs.readFileSync(scriptFile, "utf8") +
  "\nglobalThis.__page = { messages, render, renderMore, drawBlock, drawPrefill, busy: () => running !== null };";

function load() {  // the page's markup, then its script, as the browser runs it: its top-level names are the page's
  for (const [tag, id] of [["span", "model"], ["input", "think"], ["input", "key"], ["button", "new"], ["main", "log"],
                           ["form", "form"], ["textarea", "input"], ["button", "send"], ["textarea", "system"],
                           ["input", "temperature"], ["input", "max-tokens"]]) {
    byId[id] = new Element(tag, id);
  }
  byId.model.textContent = "clover-local";  // (before its script names the model)
  byId.think.checked = process.env.THINK === "1";  // the page's "think first" box (THINK=1: ticked)
  eval(script);
}
load();

function find(node, test) {  // the first element under `node` that passes `test`, depth first
  for (const child of node.children) {
    if (test(child)) return child;
    const found = find(child, test);
    if (found) return found;
  }
  return null;
}

function shown() {
  return byId.log.children.map((turn) => ({
    className: turn.className,
    text: turn.children.length ? undefined : turn.textContent,
    parts: turn.children.map((c) => ({ tag: c.tag, className: c.className, hidden: c.hidden, text: c.textContent })),
  }));
}

// What a rendered answer holds, written as HTML: elements with the properties the page sets, text escaped (so a
// "<b>" the model wrote reads as text, not as an element).
const escape = (text) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
function html(node) {
  if (node.tag === "#text") return escape(node._text);
  const attrs = ["className", "start", "href", "target", "rel", "value", "max"].filter((k) => node[k])
    .map((k) => ` ${k === "className" ? "class" : k}="${node[k]}"`).join("") +
    Object.entries(node.style).map(([k, v]) => ` style-${k}="${v}"`).join("");
  return `<${node.tag}${attrs}>${escape(node._text)}${node.children.map(html).join("")}</${node.tag}>`;
}

if (toSend[0] === "--render" || toSend[0] === "--block") {  // what the page makes of an answer's text (render) or
  const el = new Element("div");                             // of a stream's block view, as JSON (drawBlock)
  if (toSend[0] === "--render") globalThis.__page.render(el, toSend[1]);
  else if (JSON.parse(toSend[1]).cells) globalThis.__page.drawBlock(el, JSON.parse(toSend[1]));
  else globalThis.__page.drawPrefill(el, JSON.parse(toSend[1]));
  console.log(JSON.stringify(el.children.map(html).join("")));
  process.exit(0);
}

if (toSend[0] === "--stream") {  // each delta's drawing against a whole render of the text so far
  const text = toSend[1], step = +toSend[2], el = new Element("div"), drawn = { line: 0, count: 0 }, differ = [];
  for (let n = Math.min(step, text.length); ; n = Math.min(n + step, text.length)) {
    globalThis.__page.renderMore(el, text.slice(0, n), drawn);
    const whole = new Element("div");
    globalThis.__page.render(whole, text.slice(0, n));
    if (el.children.map(html).join("") !== whole.children.map(html).join("")) differ.push(n);
    if (n === text.length) break;
  }
  console.log(JSON.stringify({ differ, html: el.children.map(html).join(""), kept: drawn.count }));
  process.exit(0);
}

const unloaded = [];
(async () => {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  for (let i = 0; i < 100 && byId.model.textContent === "clover-local" && !byId.log.children.length; i++) await sleep(50);
  for (const text of toSend) {
    if (text === "--reload") {  // the page loaded anew in the same tab (what it showed before: `unloaded`)
      unloaded.push(shown());
      load();
      await sleep(100);
      continue;
    }
    if (text === "--toggle-think") {  // the "think first" box clicked
      byId.think.checked = !byId.think.checked;
      byId.think.dispatch("change");
      continue;
    }
    if (text.startsWith("--set ")) {  // a settings field typed into
      const [id, ...value] = text.slice(6).split("=");
      byId[id].value = value.join("=");
      byId[id].dispatch("input");
      continue;
    }
    if (text === "--retry") find(byId.log, (el) => el.tag === "button" && el.textContent === "retry").dispatch("click");
    else {
      byId.input.value = text;
      byId.form.dispatch("submit");
    }
    await sleep(20);
    for (let i = 0; i < 1200 && globalThis.__page.busy(); i++) await sleep(50);
  }
  console.log(JSON.stringify({ model: byId.model.textContent, title: document.title, keyShown: byId.key.style.display,
                               turns: shown(), messages: globalThis.__page.messages(), asked, unloaded,
                               input: byId.input.value, think: byId.think.checked,
                               settings: ["system", "temperature", "max-tokens"].map((id) => byId[id].value) }));
})();
