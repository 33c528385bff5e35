"""The inline stylesheet and script of the HTML report (no CDN: the file stands alone).

The script filters the case table (search text, outcome, tag, change against the baseline) and
opens a case's transcript in a dialog from the JSON embedded in the page; it builds every node
with ``textContent``, so no recorded text is ever parsed as HTML.
"""

from __future__ import annotations

CSS = """
:root { --fg:#1d2330; --muted:#667085; --line:#e4e7ec; --ok:#1a7f37; --bad:#cf222e;
        --err:#9a6700; --accent:#3b5bdb; }
* { box-sizing:border-box; }
body { font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif; color:var(--fg);
       margin:0; padding:24px 32px; background:#f8f9fb; }
h1 { font-size:20px; margin:0 0 4px; } h2 { font-size:16px; margin:24px 0 8px; }
.sub { color:var(--muted); margin-bottom:16px; }
.cards { display:flex; flex-wrap:wrap; gap:12px; }
.card { background:#fff; border:1px solid var(--line); border-radius:8px; padding:10px 14px;
        min-width:140px; }
.card b { display:block; font-size:20px; } .card span { color:var(--muted); font-size:12px; }
.grid { display:grid; grid-template-columns:repeat(auto-fit,minmax(440px,1fr)); gap:16px; }
.panel { background:#fff; border:1px solid var(--line); border-radius:8px; padding:12px 16px; }
.chart { max-width:100%; height:auto; }
.chart rect { fill:var(--accent); } .chart rect.track { fill:#eef1f6; }
.chart text { font-size:11px; fill:var(--muted); }
table { border-collapse:collapse; width:100%; background:#fff; }
th, td { text-align:left; padding:6px 8px; border-bottom:1px solid var(--line);
         vertical-align:top; }
th { font-size:12px; color:var(--muted); font-weight:600; background:#fafbfc; }
td.num { text-align:right; font-variant-numeric:tabular-nums; }
td.out { max-width:420px; overflow:hidden; text-overflow:ellipsis; white-space:nowrap; }
.badge { display:inline-block; padding:1px 7px; border-radius:10px; font-size:12px;
         background:#eef1f6; }
.passed, .improved { color:var(--ok); } .failed, .regressed { color:var(--bad); }
.errored { color:var(--err); }
.filters { display:flex; gap:8px; align-items:center; margin:8px 0; flex-wrap:wrap; }
.filters input { width:280px; } input, select, button { font:inherit; padding:4px 8px; }
button.open { cursor:pointer; }
dialog { width:min(900px,92vw); max-height:86vh; border:1px solid var(--line);
         border-radius:10px; padding:0; }
dialog header { display:flex; justify-content:space-between; align-items:center;
                padding:10px 16px; border-bottom:1px solid var(--line); position:sticky; top:0;
                background:#fff; }
dialog .body { padding:10px 16px; }
dl.case { display:grid; grid-template-columns:110px 1fr; gap:4px 12px; margin:0 0 12px; }
dl.case dt { color:var(--muted); } dl.case dd { margin:0; white-space:pre-wrap; }
ol.events { list-style:none; padding:0; margin:0; }
ol.events li { border-left:3px solid var(--line); padding:4px 10px; margin:4px 0;
               white-space:pre-wrap; }
ol.events li .type { font-weight:600; font-size:12px; color:var(--muted); margin-right:8px; }
ol.events li[data-type=USER_INPUT] { border-color:var(--accent); }
ol.events li[data-type=MODEL_RESPONSE], ol.events li[data-type=FINAL_OUTPUT] {
  border-color:var(--ok); }
ol.events li[data-type=TOOL_CALL], ol.events li[data-type=TOOL_RESULT] {
  border-color:var(--err); }
ol.events li[data-type=ERROR] { border-color:var(--bad); }
.empty { color:var(--muted); }
"""

JS = r"""
(function () {
  const data = JSON.parse(document.getElementById('report-data').textContent);
  const rows = Array.from(document.querySelectorAll('#cases tbody tr'));
  const q = document.getElementById('search');
  const outcome = document.getElementById('outcome');
  const tag = document.getElementById('tag');
  const change = document.getElementById('change');
  const shown = document.getElementById('shown');
  function apply() {
    const text = q.value.trim().toLowerCase();
    let n = 0;
    for (const tr of rows) {
      const ok = (!text || tr.dataset.search.includes(text)) &&
        (!outcome.value || tr.dataset.outcome === outcome.value) &&
        (!tag.value || tr.dataset.tags.split('|').includes(tag.value)) &&
        (!change || !change.value || tr.dataset.change === change.value);
      tr.hidden = !ok;
      if (ok) n++;
    }
    shown.textContent = n + ' of ' + rows.length + ' shown';
  }
  for (const el of [q, outcome, tag, change]) {
    if (el) { el.addEventListener('input', apply); el.addEventListener('change', apply); }
  }
  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }
  function summarize(p) {
    if (p.text) return p.text;
    if (p.item && p.item.content !== undefined) return p.item.content;
    if (p.item && p.item.output !== undefined) {
      return (p.item.name ? p.item.name + ' -> ' : '') + p.item.output;
    }
    if (p.call) return p.call.name + '(' + p.call.arguments + ')';
    if (p.tool_calls && p.tool_calls.length) {
      return 'calls ' + p.tool_calls.map(c => c.name + '(' + c.arguments + ')').join(', ');
    }
    if (p.message) return p.message;
    const keys = Object.keys(p);
    return keys.length ? JSON.stringify(p) : '';
  }
  const dialog = document.getElementById('transcript');
  function open(index) {
    const row = data.rows[index];
    const events = data.transcripts[index];
    document.getElementById('t-title').textContent = row.id + ' · epoch ' + row.epoch;
    const body = document.getElementById('t-body');
    body.replaceChildren();
    const dl = el('dl', 'case');
    const fields = [['status', row.status + ' (' + row.outcome + ')'], ['session', row.session_id],
      ['input', row.input], ['expected', row.expected === null || row.expected === undefined ?
        '' : (typeof row.expected === 'string' ? row.expected : JSON.stringify(row.expected))],
      ['output', row.output], ['error', row.error]];
    for (const [name, score] of Object.entries(row.scores)) {
      const v = score.error ? 'error: ' + score.error :
        score.value + (score.passed ? ' pass' : ' fail') +
        (score.explanation ? ' - ' + score.explanation : '');
      fields.push(['score ' + name, v]);
    }
    for (const [k, v] of fields) {
      if (v === null || v === undefined || v === '') continue;
      dl.append(el('dt', null, k), el('dd', null, v));
    }
    body.append(dl);
    const list = el('ol', 'events');
    list.id = 't-events';
    if (!events.length) body.append(el('p', 'empty', 'no stored events for this case'));
    for (const e of events) {
      const li = el('li');
      li.dataset.type = e.type;
      li.append(el('span', 'type', '#' + e.seq + ' ' + e.type + ' · step ' + e.step));
      li.append(document.createTextNode(summarize(e.payload)));
      list.append(li);
    }
    body.append(list);
    dialog.showModal();
  }
  document.getElementById('cases').addEventListener('click', (ev) => {
    const button = ev.target.closest('button.open');
    if (button) open(Number(button.closest('tr').dataset.index));
  });
  document.getElementById('t-close').addEventListener('click', () => dialog.close());
  apply();
})();
"""

__all__ = ["CSS", "JS"]
