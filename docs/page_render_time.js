// What drawing a streamed answer costs serve's chat page, in Node on a DOM stand-in (a browser's DOM is slower;
// the ratio is the point): a 21K-character Markdown answer (60 sections: heading, paragraph, list, code) sent in
// 600 deltas, drawn by a whole render per delta (render) against the page's streaming draw (renderMore).
//   node docs/page_render_time.js            (from the repository root; prints one JSON line)
"use strict";
const fs = require("fs");
class Element {
  constructor(tag) { this.tag = tag; this.children = []; this._text = ""; this.style = {}; }
  set textContent(v) { this._text = String(v); this.children = []; }
  get textContent() { return this._text + this.children.map((c) => c.textContent).join(""); }
  appendChild(node) { this.children.push(node); node.parent = this; return node; }
  append(...nodes) { nodes.forEach((n) => this.appendChild(n)); }
  remove() { if (this.parent) this.parent.children = this.parent.children.filter((c) => c !== this); }
  addEventListener() {}
  focus() {}
  get scrollHeight() { return 0; }
}
const ids = {};
for (const id of ["model", "think", "key", "new", "log", "form", "input", "send"]) ids[id] = new Element("x");
globalThis.document = { getElementById: (i) => ids[i], createElement: (t) => new Element(t),
                        createTextNode: (t) => { const e = new Element("#text"); e.textContent = t; return e; } };
globalThis.navigator = {};
globalThis.sessionStorage = { getItem: () => null, setItem: () => {} };
globalThis.fetch = async () => { throw new Error("no server here"); };
const page = fs.readFileSync("clover_local/serve/ui.html", "utf8");
eval(/<script>([\s\S]*)<\/script>/.exec(page)[1] + "\nglobalThis.__draw = { render, renderMore };");
const { render, renderMore } = globalThis.__draw;

const para = "Some **bold** text with `code` and a [link](https://x.org) and more words here to make it long. ";
let text = "";
for (let i = 0; i < 60; i++) {
  text += "## Section " + i + "\n\n" + para.repeat(3) + "\n\n- item one\n- item *two*\n\n```js\nconst x = " + i +
    ";\n```\n\n";
}
const step = Math.ceil(text.length / 600), time = (draw) => {
  const el = new Element("div"), drawn = { line: 0, count: 0 }, t0 = process.hrtime.bigint();
  let deltas = 0, worst = 0n;
  for (let n = step; ; n = Math.min(n + step, text.length)) {
    const t = process.hrtime.bigint();
    draw(el, text.slice(0, n), drawn);
    const took = process.hrtime.bigint() - t;
    if (took > worst) worst = took;
    deltas++;
    if (n === text.length) break;
  }
  return { deltas, total_ms: Number(process.hrtime.bigint() - t0) / 1e6, worst_delta_ms: Number(worst) / 1e6 };
};
const best = (draw) => [0, 1, 2, 3, 4].map(() => time(draw)).sort((a, b) => a.total_ms - b.total_ms)[0];
console.log(JSON.stringify({ chars: text.length, whole_render: best(render), streaming_draw: best(renderMore),
                             node: process.version }));
