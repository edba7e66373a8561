"""`kernelsmith report`: one self-contained HTML file for a run dir or a bench OUT dir.

Everything is inline (CSS, a little JS, SVG charts drawn here in Python); the page loads nothing from anywhere.
Candidate code, verdict logs and error text are untrusted: every string that reaches HTML goes through
`html.escape`, and the per-program data the page's script reads is a JSON block with `<`, `>` and `&` written as
`\\u003c`, `\\u003e`, `\\u0026` (so no text can close the script element); the script only ever assigns
`textContent`, never HTML.

A run report: best speedup and correct rate per round, the lineage tree (every program, coloured by status,
sized by speedup; clicking a node shows its code, the diff to its parent and its verdict; `#program=NAME` in the
URL opens one), the MAP-Elites grid of the rebuilt archive, failures by status and by guard, tokens and cost.
A bench report: the metrics per level and overall (against eager and torch.compile) and a row per task with a
link to that task's run report.
"""

from __future__ import annotations

import difflib
import html
import json
import math
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from kernelsmith.bench.metrics import FAST_P
from kernelsmith.bench.rundata import RunData, load_run, rebuild_archive

STATUS_COLOURS = {
    "correct": "#2e9d4f", "incorrect": "#e0a020", "compile_error": "#8a6fd1", "runtime_error": "#d1603d",
    "timeout": "#7a7a7a", "crashed": "#444444", "rejected": "#c0143c", "not evaluated": "#bbbbbb",
    "no_candidate": "#bbbbbb", "bad_candidate": "#8a6fd1", "error": "#444444", "no_program": "#bbbbbb",
}
LOG_CHARS = 6000  # verdict logs are cut to this many characters in the page

CSS = """
*{box-sizing:border-box}body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;
background:#f6f7f9}header{background:#1d2330;color:#fff;padding:16px 24px}header h1{margin:0;font-size:20px}
header .sub{opacity:.8;font-size:13px}main{padding:16px 24px;max-width:1500px}section{background:#fff;
border:1px solid #e1e4ea;border-radius:8px;padding:12px 16px;margin:0 0 16px}h2{font-size:16px;margin:0 0 8px}
table{border-collapse:collapse;font-size:13px}td,th{border-bottom:1px solid #eceef2;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f3f4f7}td.num{text-align:right;font-variant-numeric:tabular-nums}
.kpis{display:flex;gap:12px;flex-wrap:wrap}.kpi{background:#f3f4f7;border-radius:6px;padding:8px 12px;min-width:140px}
.kpi b{display:block;font-size:18px}.charts{display:flex;gap:16px;flex-wrap:wrap}.scroll{overflow:auto;max-height:560px;
border:1px solid #eceef2}svg text{font-size:11px;fill:#333}.node{cursor:pointer}.node:hover circle{stroke:#000;
stroke-width:2}.node.selected circle{stroke:#000;stroke-width:3}.edge{stroke:#9aa3b2;stroke-width:1.2;fill:none}
pre{background:#0f1420;color:#e8ebf1;padding:10px;border-radius:6px;overflow:auto;max-height:520px;font-size:12px;
margin:4px 0}.diff .add{color:#7ee787}.diff .del{color:#ff7b72}.diff .hunk{color:#79c0ff}.pill{display:inline-block;
border-radius:10px;padding:0 8px;color:#fff;font-size:12px}.grid td{min-width:72px;height:38px;text-align:center}
a.prog{cursor:pointer;color:#1f5fbf;text-decoration:underline}.muted{color:#778}.legend span{margin-right:10px}
#detail .cols{display:grid;grid-template-columns:1fr 1fr;gap:12px}#detail .cols>div{min-width:0}@media(max-width:1000px){#detail .cols{display:block}}
"""

JS = """
(function(){
  var DATA = JSON.parse(document.getElementById('ks-data').textContent);
  function el(tag, cls, text){var e=document.createElement(tag); if(cls) e.className=cls;
    if(text!==undefined) e.textContent=text; return e;}
  function fmt(x){return (x===null||x===undefined)?'not measured':(Number(x).toFixed(3)+'\\u00d7');}
  function open(name){
    var p = DATA.programs[name]; if(!p) return;
    document.getElementById('detail').hidden = false;
    document.getElementById('p-title').textContent = name + ' \\u2014 ' + p.status + ', speedup ' + fmt(p.speedup)
      + ', round ' + p.round + ', island ' + p.island + (p.parent ? ', parent ' + p.parent : ', no parent');
    document.getElementById('p-error').textContent = p.error || '';
    document.getElementById('p-code').textContent = p.code;
    var d = document.getElementById('p-diff'); while(d.firstChild) d.removeChild(d.firstChild);
    if(!p.diff.length) d.appendChild(el('span','', p.parent ? '(same code as the parent)' : '(no parent: the whole program is new)'));
    p.diff.forEach(function(line){
      var c = line.startsWith('@@') ? 'hunk' : (line.startsWith('+') ? 'add' : (line.startsWith('-') ? 'del' : ''));
      d.appendChild(el('span', c, line + '\\n'));});
    document.getElementById('p-verdict').textContent = JSON.stringify(p.verdict, null, 2);
    document.querySelectorAll('.node.selected').forEach(function(n){n.classList.remove('selected');});
    document.querySelectorAll('.node[data-program]').forEach(function(n){
      if(n.getAttribute('data-program')===name) n.classList.add('selected');});
    document.body.setAttribute('data-open', name);
    if(history.replaceState) history.replaceState(null, '', '#program=' + encodeURIComponent(name));
  }
  document.querySelectorAll('[data-program]').forEach(function(n){
    n.addEventListener('click', function(ev){ev.preventDefault(); open(n.getAttribute('data-program'));
      document.getElementById('detail').scrollIntoView({block:'nearest'});});
    n.addEventListener('keydown', function(ev){if(ev.key==='Enter') open(n.getAttribute('data-program'));});
  });
  var m = /program=([^&]+)/.exec(location.hash);
  open(m ? decodeURIComponent(m[1]) : DATA.best);
  document.body.setAttribute('data-ready', '1');
})();
"""


def esc(v: Any) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _json_for_script(obj: Any) -> str:
    return (json.dumps(obj, default=str).replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def fmt_speedup(x: Any) -> str:
    return f"{float(x):.3f}×" if isinstance(x, (int, float)) and math.isfinite(x) and x > 0 else "not measured"


def fmt_pct(x: Any) -> str:
    return f"{100 * x:.1f}%" if isinstance(x, (int, float)) else "—"


def pill(status: str) -> str:
    return f'<span class="pill" style="background:{STATUS_COLOURS.get(status, "#555")}">{esc(status)}</span>'


def page(title: str, subtitle: str, body: str, data: dict[str, Any] | None = None) -> str:
    script = ""
    if data is not None:
        script = (f'<script type="application/json" id="ks-data">{_json_for_script(data)}</script>'
                  f"<script>{JS}</script>")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<style>{CSS}</style></head><body><header><h1>{esc(title)}</h1>"
            f'<div class="sub">{esc(subtitle)}</div></header><main>{body}</main>{script}</body></html>')


# ---- charts --------------------------------------------------------------------------------------------------------
def line_chart(xs: list[int], series: list[tuple[str, str, list[float | None]]], *, title: str, y_fmt: Any,
               y_min: float | None = None, y_max: float | None = None, chart_id: str = "") -> str:
    """An SVG line chart; `series` = (label, colour, values aligned with xs; None = no point)."""
    w, h, left, right, top, bottom = 460, 230, 52, 12, 40, 30
    vals = [v for _, _, ys in series for v in ys if v is not None]
    if not xs or not vals:
        return f'<svg id="{esc(chart_id)}" width="{w}" height="60"><text x="8" y="20">{esc(title)}</text>' \
               '<text x="8" y="44" class="muted">no data</text></svg>'
    lo = min(vals) if y_min is None else y_min
    hi = max(vals) if y_max is None else y_max
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    x0, x1 = min(xs), max(xs)

    def px(x: float) -> float:
        return left + (w - left - right) * ((x - x0) / (x1 - x0) if x1 > x0 else 0.5)

    def py(y: float) -> float:
        return top + (h - top - bottom) * (1 - (y - lo) / (hi - lo))

    parts = [f'<svg id="{esc(chart_id)}" width="{w}" height="{h}" role="img" aria-label="{esc(title)}">',
             f'<text x="{left}" y="14" font-weight="bold">{esc(title)}</text>',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="#999"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="#999"/>']
    for i in range(5):
        y = lo + (hi - lo) * i / 4
        parts.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{w - right}" y2="{py(y):.1f}" stroke="#eee"/>'
                     f'<text x="{left - 4}" y="{py(y) + 4:.1f}" text-anchor="end">{esc(y_fmt(y))}</text>')
    step = max(1, math.ceil(len(xs) / 12))
    for x in xs[::step]:
        parts.append(f'<text x="{px(x):.1f}" y="{h - bottom + 14}" text-anchor="middle">{x}</text>')
    parts.append(f'<text x="{(w + left) / 2:.0f}" y="{h - 2}" text-anchor="middle">round</text>')
    for label, colour, ys in series:
        pts = [(px(x), py(y), x, y) for x, y in zip(xs, ys) if y is not None]
        if len(pts) > 1:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                         + " ".join(f"{a:.1f},{b:.1f}" for a, b, _, _ in pts) + '"/>')
        for a, b, x, y in pts:
            parts.append(f'<circle class="pt" cx="{a:.1f}" cy="{b:.1f}" r="3.5" fill="{colour}">'
                         f"<title>{esc(label)}, round {x}: {esc(y_fmt(y))}</title></circle>")
    lx = left + 8
    for label, colour, _ in series:
        parts.append(f'<rect x="{lx}" y="24" width="10" height="3" fill="{colour}"/>'
                     f'<text x="{lx + 14}" y="29">{esc(label)}</text>')
        lx += 16 + 7 * len(label)
    parts.append("</svg>")
    return "".join(parts)


# ---- run report -----------------------------------------------------------------------------------------------------
def _diff(parent: str | None, code: str, limit: int = 600) -> list[str]:
    lines = list(difflib.unified_diff((parent or "").splitlines(), code.splitlines(), "parent", "program",
                                      lineterm="", n=2))
    return lines[:limit] + ([f"... ({len(lines) - limit} more diff lines)"] if len(lines) > limit else [])


def round_stats(run: RunData) -> list[dict[str, Any]]:
    prompts = Counter(p["round"] for p in run.prompts)
    tokens: dict[int, int] = defaultdict(int)
    for r in run.responses:
        rnd = r["round"]
        if rnd is not None:
            u = r["usage"] or {}
            tokens[rnd] += int(u.get("prompt_tokens") or 0) + int(u.get("completion_tokens") or 0)
    rounds = sorted({p["round"] for p in run.programs} | set(prompts))
    out, best, best_score = [], None, None
    for rnd in rounds:
        mine = [p for p in run.programs if p["round"] == rnd and p["verdict"] is not None]
        correct = [p for p in mine if p["status"] == "correct"]
        sp = [p["speedup"] for p in correct if p["speedup"]]
        if sp:
            best = max(best or 0.0, max(sp))
        sc = [p["score"] for p in mine if p["score"] is not None]
        if sc:
            best_score = max(best_score if best_score is not None else -1.0, max(sc))
        out.append({"round": rnd, "proposals": prompts.get(rnd, 0), "evaluated": len(mine), "correct": len(correct),
                    "correct_rate": len(correct) / len(mine) if mine else None,
                    "round_best": max(sp) if sp else None, "best": best, "best_score": best_score,
                    "tokens": tokens.get(rnd, 0)})
    return out


def lineage_svg(run: RunData, best: str | None) -> str:
    """Every program: x by round, y by child order; an edge from each parent; colour = status, size = speedup."""
    progs = sorted(run.programs, key=lambda p: (p["round"], _child(p["name"])))
    if not progs:
        return '<p class="muted">no programs yet</p>'
    rounds = sorted({p["round"] for p in progs})
    col = {r: i for i, r in enumerate(rounds)}
    slots: dict[int, int] = defaultdict(int)
    pos: dict[str, tuple[float, float]] = {}
    for p in progs:
        pos[p["name"]] = (50 + 90 * col[p["round"]], 40 + 34 * slots[p["round"]])
        slots[p["round"]] += 1
    w = 100 + 90 * (len(rounds) - 1) + 60
    h = 60 + 34 * max(slots.values())
    parts = [f'<svg id="lineage" width="{w}" height="{h}" role="img" aria-label="lineage tree">']
    for r in rounds:
        label = "seed" if r < 0 else f"round {r + 1}"  # rounds shown 1..N, as the live panel counts them
        parts.append(f'<text x="{50 + 90 * col[r]}" y="16" text-anchor="middle">{esc(label)}</text>')
    for p in progs:
        if p["parent"] in pos:
            (x1, y1), (x2, y2) = pos[p["parent"]], pos[p["name"]]
            mx = (x1 + x2) / 2
            parts.append(f'<path class="edge" d="M{x1:.0f},{y1:.0f} C{mx:.0f},{y1:.0f} {mx:.0f},{y2:.0f} '
                         f'{x2:.0f},{y2:.0f}"/>')
    for p in progs:
        x, y = pos[p["name"]]
        sp = p["speedup"]
        r = min(16.0, 6 + 5 * math.log2(1 + sp)) if sp else (7.0 if p["status"] == "correct" else 5.0)
        colour = STATUS_COLOURS.get(p["status"], "#555")
        ring = ' stroke="#000" stroke-dasharray="2,2" stroke-width="1.5"' if p["name"] == best else ""
        tip = f"{p['name']}: {p['status']}, speedup {fmt_speedup(sp)}"
        parts.append(f'<g class="node" data-program="{esc(p["name"])}" tabindex="0">'
                     f'<circle cx="{x:.0f}" cy="{y:.0f}" r="{r:.1f}" fill="{colour}"{ring}/>'
                     f'<text x="{x + r + 3:.0f}" y="{y + 4:.0f}">{esc(p["name"])}</text>'
                     f"<title>{esc(tip)}</title></g>")
    parts.append("</svg>")
    return "".join(parts)


def _child(name: str) -> int:
    tail = str(name).rsplit("c", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _link(name: str) -> str:
    return f'<a class="prog" data-program="{esc(name)}" href="#program={esc(name)}">{esc(name)}</a>'


def grid_section(run: RunData) -> str:
    archive, why = rebuild_archive(run)
    if archive is None:
        return f'<p class="muted">archive not available: {esc(why)}</p>'
    grid = archive.grid()
    if not grid:
        return '<p class="muted">the archive is empty (no finished round yet)</p>'
    b = archive.bins
    n_c, n_s = len(b.complexity) + 1, len(b.score) + 1

    def edges(e: tuple[float, ...], i: int) -> str:
        lo = "" if i == 0 else f"{e[i - 1]:g}"
        hi = "" if i == len(e) else f"{e[i]:g}"
        return f"≥{lo}" if not hi else (f"<{hi}" if not lo else f"{lo}–{hi}")

    cells: dict[tuple[int, int], list[tuple[tuple[int, ...], Any]]] = defaultdict(list)
    for c, p in grid.items():
        cells[(c[1], c[0])].append((c, p))
    rows = []
    for s in reversed(range(n_s)):
        tds = []
        for cx in range(n_c):
            here = cells.get((s, cx), [])
            if not here:
                tds.append("<td></td>")
                continue
            top = max(here, key=lambda cp: cp[1].score)[1]
            colour = STATUS_COLOURS.get(top.status, "#555")
            links = " ".join(_link(str(p.id)) for _, p in here)
            tds.append(f'<td class="cell" style="background:{colour}22;border:2px solid {colour}" '
                       f'title="{len(here)} cell(s)">{links}</td>')
        rows.append(f"<tr><th>score {esc(edges(b.score, s))}</th>{''.join(tds)}</tr>")
    head = "".join(f"<th>AST {esc(edges(b.complexity, i))}</th>" for i in range(n_c))
    detail = "".join(
        f"<tr><td>{esc(c)}</td><td>{_link(str(p.id))}</td><td>{pill(p.status)}</td>"
        f'<td class="num">{p.score:.3f}</td><td class="num">{esc(fmt_speedup(p.speedup))}</td></tr>'
        for c, p in sorted(grid.items()))
    return (f"<p>{len(grid)} occupied cells of {b.n_cells} (axes: complexity, score band, kernels, uses tl.dot, "
            "fusion). The table folds the last three axes: each box lists the elites of every cell with that "
            "complexity and score band.</p>"
            f'<table class="grid" id="archive-grid"><tr><th></th>{head}</tr>{"".join(rows)}</table>'
            "<details><summary>every cell</summary><table><tr><th>cell (complexity, score, kernels, dot, fusion)"
            f"</th><th>elite</th><th>status</th><th>score</th><th>speedup</th></tr>{detail}</table></details>")


def failures_section(run: RunData) -> str:
    by_status: dict[str, list[str]] = defaultdict(list)
    by_guard: dict[tuple[str, str], list[str]] = defaultdict(list)
    for p in run.programs:
        v = p["verdict"] or {}
        if p["status"] != "correct":
            cls = p["status"]
            if str(v.get("error", "")).startswith("unusable response"):
                cls = f"{cls} (unusable response)"
            by_status[cls].append(p["name"])
        for g in v.get("guards") or []:
            by_guard[(str(g.get("name")), str(g.get("severity", "")))].append(p["name"])
    parts = []
    if by_status:
        parts.append('<table id="failures-by-status"><tr><th>status</th><th>programs</th><th>which</th></tr>' + "".join(
            f'<tr><td>{pill(k.split(" ")[0])} {esc(k[len(k.split(" ")[0]):])}</td><td class="num">{len(v)}</td>'
            f"<td>{' '.join(_link(n) for n in v[:30])}{' …' if len(v) > 30 else ''}</td></tr>"
            for k, v in sorted(by_status.items(), key=lambda kv: -len(kv[1]))) + "</table>")
    else:
        parts.append('<p id="failures-by-status">no failures: every evaluated program is correct</p>')
    if by_guard:
        parts.append('<h3>guard findings</h3><table id="failures-by-guard"><tr><th>guard</th><th>severity</th>'
                     "<th>programs</th><th>which</th></tr>" + "".join(
                         f"<tr><td>{esc(n)}</td><td>{esc(s)}</td><td class=\"num\">{len(v)}</td>"
                         f"<td>{' '.join(_link(x) for x in v[:30])}{' …' if len(v) > 30 else ''}</td></tr>"
                         for (n, s), v in sorted(by_guard.items(), key=lambda kv: -len(kv[1]))) + "</table>")
    return "".join(parts)


def tokens_section(run: RunData) -> str:
    s = run.summary
    per_model: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0, 0.0])
    for r in run.responses:
        u = r["usage"] or {}
        m = per_model[r["model"]]
        m[0] += 1
        m[1] += int(u.get("prompt_tokens") or 0)
        m[2] += int(u.get("completion_tokens") or 0)
        m[3] += float(u.get("cost_usd") or 0.0)
    tokens = s.get("tokens", sum(int(m[1] + m[2]) for m in per_model.values()))
    cost = s.get("cost_usd", sum(m[3] for m in per_model.values()))
    rows = "".join(f'<tr><td>{esc(k)}</td><td class="num">{int(m[0])}</td><td class="num">{int(m[1])}</td>'
                   f'<td class="num">{int(m[2])}</td><td class="num">${m[3]:.4f}</td></tr>'
                   for k, m in sorted(per_model.items()))
    return (f'<div class="kpis"><div class="kpi" id="tokens-total">tokens (this run)<b>{int(tokens or 0)}</b></div>'
            f'<div class="kpi" id="cost-total">cost<b>${float(cost or 0):.4f}</b></div>'
            f'<div class="kpi">answers recorded<b>{len(run.responses)}</b></div>'
            f'<div class="kpi">unusable responses<b>{esc(s.get("unusable_responses", "—"))}</b></div>'
            f'<div class="kpi">duplicates<b>{esc(s.get("duplicates", "—"))}</b></div></div>'
            "<p class=\"muted\">tokens and cost are the run's counters (what this run paid for, over every resume; a "
            "replay's answers cost nothing); the table sums what each recorded answer reported.</p>"
            "<table><tr><th>model</th><th>answers</th><th>prompt tokens</th><th>completion tokens</th>"
            f"<th>cost</th></tr>{rows}</table>")


def precision_of_run(run: RunData) -> str:
    """The run's precision and numerics policy: its config's, else what its verdicts recorded (a run made before
    the settings existed: not recorded)."""
    from kernelsmith.bench.runner import precision_label

    c = run.config
    if c.get("precision"):
        return precision_label(c.get("precision"), c.get("numerics") or "tolerance")
    seen = sorted({(str((p["verdict"] or {}).get("precision") or ""), str((p["verdict"] or {}).get("numerics") or ""))
                   for p in run.programs if p["verdict"]} - {("", "")})
    if not seen:
        return precision_label(None)
    return "; ".join(precision_label(prec or None, num or None) for prec, num in seen)


def run_report(run_dir: Path) -> str:
    """The HTML page for one run dir."""
    run = load_run(run_dir)
    s, c = run.summary, run.config
    correct = [p for p in run.programs if p["status"] == "correct"]
    timed = [p for p in correct if p["speedup"]]
    best_name = s.get("best_id")
    if best_name not in run.by_name:
        best_name = (max(timed, key=lambda p: p["speedup"])["name"] if timed else
                     (max(run.programs, key=lambda p: p["score"] or 0)["name"] if run.programs else None))
    best = run.by_name.get(best_name) if best_name else None
    device = c.get("device", "")
    if best is None:
        best_text = "no program yet"
    elif best.get("speedup"):
        best_text = f"{best['speedup']:.3f}× ({best_name}, {best['status']})"
    elif best["status"] == "correct":
        best_text = f"not measured{' (cpu)' if device == 'cpu' else ''} — best correct program {best_name}"
    else:
        best_text = f"no correct program (best {best_name}: {best['status']})"
    task = s.get("task") or Path(str(c.get("task", "run"))).stem
    stats = round_stats(run)
    xs = [r["round"] + 1 for r in stats]  # rounds shown 1..N everywhere (program names count from 0: "r0c1")
    hw = run.counters.get("hardware") or {}
    if timed:
        speed_chart = line_chart(xs, [("best so far", "#1f5fbf", [r["best"] for r in stats]),
                                      ("round best", "#e0a020", [r["round_best"] for r in stats])],
                                 title="best speedup per round", y_fmt=lambda v: f"{v:.2f}×", chart_id="chart-speedup")
    else:
        speed_chart = (f'<svg id="chart-speedup" width="460" height="60"><text x="8" y="20" font-weight="bold">'
                       'best speedup per round</text><text x="8" y="44">speedup not measured'
                       f'{" (cpu: the Triton interpreter is not timed)" if device == "cpu" else ""}</text></svg>')
    charts = (speed_chart
              + line_chart(xs, [("correct rate", "#2e9d4f", [r["correct_rate"] for r in stats])],
                           title="correct rate per round", y_fmt=lambda v: f"{100 * v:.0f}%", y_min=0.0, y_max=1.0,
                           chart_id="chart-correct")
              + line_chart(xs, [("best score so far", "#8a6fd1", [r["best_score"] for r in stats])],
                           title="best score per round", y_fmt=lambda v: f"{v:.2f}", chart_id="chart-score"))
    round_rows = "".join(
        f'<tr><td class="num">{r["round"] + 1}</td><td class="num">{r["proposals"]}</td><td class="num">{r["evaluated"]}'
        f'</td><td class="num">{r["correct"]}</td><td class="num">{fmt_pct(r["correct_rate"])}</td>'
        f'<td class="num">{esc(fmt_speedup(r["best"]))}</td><td class="num">{r["tokens"]}</td></tr>' for r in stats)
    legend = "".join(f'<span>{pill(k)}</span>' for k in sorted({p["status"] for p in run.programs}))
    kpis = (f'<div class="kpis"><div class="kpi" id="best-speedup">best speedup<b>{esc(best_text)}</b></div>'
            f'<div class="kpi">correct<b id="correct-count">{len(correct)}/{len(run.programs)}</b></div>'
            f'<div class="kpi">rounds<b>{run.rounds_done}/{esc(c.get("rounds", "?"))}</b></div>'
            f'<div class="kpi">programs<b id="program-count">{len(run.programs)}</b></div>'
            f'<div class="kpi">run<b>{esc(run.status)}</b></div></div>')
    hw_name = str(hw.get("name", ""))
    if device == "cuda" and hw_name.startswith("cpu"):  # a run asked for cuda on a machine without a GPU
        hw_name = "no GPU was found when the run started"
    body = (f"<section>{kpis}<p class=\"muted\">device {esc(device)}: {esc(hw_name)}; "
            f"proposer {esc(c.get('proposer', ''))}; models {esc(', '.join(m.get('name', '') for m in c.get('models') or []) or 'none (offline)')}; "
            f"elapsed {esc(s.get('elapsed_s', '—'))} s; stopped: {esc(s.get('stopped') or 'no')}</p>"
            f'<p class="muted" id="precision">{esc(precision_of_run(run))}</p></section>'
            f'<section><h2>Progress</h2><div class="charts">{charts}</div>'
            "<details><summary>per round</summary><table><tr><th>round</th><th>proposals</th><th>evaluated</th>"
            f"<th>correct</th><th>rate</th><th>best so far</th><th>tokens</th></tr>{round_rows}</table></details>"
            "</section>"
            f'<section><h2>Lineage</h2><p class="legend">{legend} size: speedup; dashed ring: the best program. '
            f'Click a node.</p><div class="scroll">{lineage_svg(run, best_name)}</div></section>'
            '<section id="detail" hidden><h2 id="p-title"></h2><div id="p-error" class="muted"></div>'
            '<div class="cols"><div><h3>code</h3><pre id="p-code"></pre></div><div><h3>diff to parent</h3>'
            '<pre id="p-diff" class="diff"></pre></div></div><h3>verdict</h3><pre id="p-verdict"></pre></section>'
            f"<section><h2>Archive (MAP-Elites grid)</h2>{grid_section(run)}</section>"
            f"<section><h2>Failures by class</h2>{failures_section(run)}</section>"
            f"<section><h2>Tokens and cost</h2>{tokens_section(run)}</section>")
    programs = {}
    for p in run.programs:
        parent = run.by_name.get(p["parent"]) if p["parent"] else None
        v = dict(p["verdict"] or {})
        if isinstance(v.get("log"), str) and len(v["log"]) > LOG_CHARS:
            v["log"] = v["log"][-LOG_CHARS:] + f"\n[log cut to its last {LOG_CHARS} characters]"
        programs[p["name"]] = {"code": p["code"], "diff": _diff(parent["code"] if parent else None, p["code"]),
                               "verdict": v, "status": p["status"], "speedup": p["speedup"], "round": p["round"],
                               "island": p["island"], "parent": p["parent"], "error": v.get("error", "")}
    return page(f"kernelsmith run: {task}", str(run_dir), body, {"programs": programs, "best": best_name})


def write_run_report(run_dir: Path, out_file: Path | None = None) -> Path:
    target = out_file or run_dir / "report.html"
    target.write_text(run_report(run_dir), encoding="utf-8")
    return target


# ---- bench report -------------------------------------------------------------------------------------------------
def metrics_table(tables: dict[str, Any]) -> str:
    parts = []
    names = ["tasks", "correct", "correct_rate", *(f"fast_{p:g}" for p in FAST_P), "amsr", "geomean"]
    for baseline, label in (("eager", "against the PyTorch reference (eager)"), ("compile", "against torch.compile")):
        t = tables.get(baseline)
        if not isinstance(t, dict):
            parts.append(f'<h3>{esc(label)}</h3><p class="muted" id="metrics-{baseline}">{esc(t)}</p>')
            continue
        head = "".join(f"<th>{esc(n)}</th>" for n in names)
        rows = []
        for group, m in t.items():
            cells = []
            for n in names:
                v = m.get(n)
                if n in ("tasks", "correct"):
                    cells.append(f'<td class="num">{v}</td>')
                elif n == "geomean":
                    cells.append(f'<td class="num">{esc(fmt_speedup(v))}</td>')
                elif n == "amsr":
                    cells.append(f'<td class="num">{v:.3f}</td>')
                else:
                    cells.append(f'<td class="num">{fmt_pct(v)}</td>')
            rows.append(f"<tr><th>{esc(group)}</th>{''.join(cells)}</tr>")
        parts.append(f'<h3>{esc(label)}</h3><table id="metrics-{baseline}"><tr><th></th>{head}</tr>'
                     f"{''.join(rows)}</table>")
    return "".join(parts)


def bench_report(out: Path, target: Path, *, run_reports: bool = True) -> str:
    from kernelsmith.bench.runner import load_bench, precision_label

    doc = load_bench(out)
    rows = doc.get("tasks", [])
    settings = doc.get("settings", {})
    trs = []
    for r in rows:
        link = ""
        run_dir = out / r["run_dir"] if r.get("run_dir") else None
        if run_dir is not None and (run_dir / "run.db").is_file():
            report = run_dir / "report.html"
            if run_reports:
                write_run_report(run_dir, report)
            if report.is_file():
                href = os.path.relpath(report, target.parent)
                link = f'<a class="run-link" href="{esc(href)}">run report</a>'
        elif r.get("candidate"):
            link = f'<span class="muted">{esc(r["candidate"])}</span>'
        vs = r.get("speedup_vs_compile")
        trs.append(f"<tr><td>{esc(r.get('task'))}</td><td>{esc(r.get('level'))}</td><td>{pill(str(r.get('status')))}"
                   f'</td><td class="num">{esc(fmt_speedup(r.get("speedup")))}</td>'
                   f'<td class="num">{esc(fmt_speedup(vs) if vs else (r.get("compile_error") or "—"))}</td>'
                   f"<td>{esc(r.get('error') or '')}</td><td>{link}</td></tr>")
    partial = ' <b>(partial: the bench has not finished)</b>' if doc.get("partial") else ""
    notes = []
    if doc.get("no_candidate"):
        notes.append(f"{doc['no_candidate']} task(s) had no candidate and count as not correct.")
    if doc.get("errors"):
        notes.append(f"{doc['errors']} task(s) ended in a bench error (retried when the bench is resumed).")
    body = (f"<section><h2>Metrics</h2><p class=\"muted\">mode {esc(settings.get('mode'))}, device "
            f"{esc(settings.get('device'))}, {len(rows)} tasks{partial}. {esc(' '.join(notes))}</p>"
            f'<p class="muted" id="precision">{esc(precision_label(settings.get("precision"), settings.get("numerics")))}'
            f"{esc(_compile_precision(rows))}</p>"
            f"{metrics_table(doc.get('metrics', {}))}</section>"
            '<section><h2>Tasks</h2><table id="tasks"><tr><th>task</th><th>level</th><th>status</th><th>speedup</th>'
            f"<th>vs torch.compile</th><th>why not correct</th><th></th></tr>{''.join(trs)}</table></section>")
    return page("kernelsmith bench", str(out), body)


def _compile_precision(rows: list[dict[str, Any]]) -> str:
    """What the torch.compile column was measured at, when that is not the bench's own precision."""
    other = sorted({str(r["compile_precision"]) for r in rows if r.get("compile_precision")} - {""})
    return f"; torch.compile timed at: {', '.join(other)}" if other else ""


def write_report(path: Path, out_file: Path | None = None) -> Path:
    """A run dir (has run.db) or a bench OUT dir (has results.jsonl / metrics.json) → its report file."""
    from kernelsmith.bench.tasks import BenchInputError

    if not path.is_dir():
        raise BenchInputError(f"{path}: no such run or bench directory")
    if (path / "run.db").is_file():
        return write_run_report(path, out_file)
    if (path / "results.jsonl").is_file() or (path / "metrics.json").is_file():
        target = out_file or path / "report.html"
        target.write_text(bench_report(path, target), encoding="utf-8")
        return target
    raise BenchInputError(f"{path}: neither a run dir (run.db) nor a bench output (results.jsonl)")
