"""index.html: a static page to look at a test set's results, written by main_test beside its images.

What a researcher does after reading the means: sort the items by a score, open the worst, and compare the
output with the input and the target at the pixel level. The page holds the scores table (sortable by any
column, the mean row kept last) and, per item, a before/after slider (input | output or output | target), a
magnifier that shows one chosen region of input, output and target side by side, and for a clip a strip of
its frames. It is self-contained: inline CSS and JavaScript, no network and no server, the images linked by
relative, percent-encoded paths to the PNGs main_test wrote, so the folder opens from disk (file://), copied
anywhere, and stays small (no image is embedded). Every name is HTML-escaped.

The module only formats: it is given the table and each item's files and knows nothing of how they were made.
"""
import html
import json
import math
import os
import urllib.parse
from typing import List, Mapping, Sequence, Tuple

from utils.checkpoint import atomic_write_text

PAGE = 'index.html'
KINDS = ('input', 'output', 'target')  # the images an item may have; the output always, the others when written
SOURCE_FOLDERS = {'input': 'input', 'target': 'target'}  # beside the outputs, which stay where they always were
BROWSER_FORMATS = ('.png', '.jpg', '.jpeg', '.bmp', '.webp', '.gif')  # what every browser shows (not TIFF, PPM/PGM)


def shown_in_browsers(ext: str) -> bool:
    """Whether an image file of extension `ext` shows in a browser's <img> (else the page needs a PNG copy)."""
    return ext.lower() in BROWSER_FORMATS


def frame_files(name: str, frames: int, kind: str = 'output') -> List[str]:
    """The paths (relative to the output folder) of an item's frames: `<name>.png` for an image,
    `<name>_000.png`, `<name>_001.png`, ... for a clip; the input and target ones in their subfolders."""
    folder = SOURCE_FOLDERS.get(kind, '')
    names = [f'{name}.png'] if frames == 1 else [f'{name}_{k:03d}.png' for k in range(frames)]
    return [f'{folder}/{n}' if folder else n for n in names]


def _url(path: str) -> str:
    """A relative path as a URL: every character but letters, digits, `_.-~` and `/` percent-encoded (so
    `#`, `?`, `%`, quotes and parentheses in a name neither cut the URL nor break CSS `url("...")`)."""
    return urllib.parse.quote(path.replace(os.sep, '/'))


def _number(v: float) -> Tuple[str, str]:
    """(the cell's text, its sort key): 4 decimals as in results.csv; the key exact ('NaN' sorts last)."""
    if math.isnan(v):
        return 'nan', 'NaN'
    if math.isinf(v):
        return ('inf' if v > 0 else '-inf'), ('Infinity' if v > 0 else '-Infinity')
    return f'{v:.4f}', repr(float(v))


def _attr(value: str) -> str:
    return html.escape(value, quote=True)


def write_page(out_dir: str, columns: Sequence[str], higher_is_better: Mapping[str, bool],
               rows: Sequence[Tuple[str, Sequence[float]]], means: Mapping[str, float],
               files: Mapping[str, Mapping[str, Sequence[str]]], title: str = '',
               notes: Sequence[str] = ()) -> str:
    """Write `out_dir/index.html` (atomically) and return its path.

    `columns`: the score names (results.csv's columns after `name`), `higher_is_better` their directions;
    `rows`: (item name, its scores) in dataset order; `means`: each column's mean; `files`: per item name, per
    kind of `KINDS`, its frames' paths relative to `out_dir` (`frame_files`), an item without files shown in the
    table only; `notes`: lines shown under the title (what the input is, for one). Without `columns` (inputs of
    one's own and no no-reference metric: nothing scored) the page has no table, only the items.
    """
    text = page_html(columns, higher_is_better, rows, means, files, title or os.path.basename(
        os.path.abspath(out_dir)), notes)
    path = os.path.join(out_dir, PAGE)
    atomic_write_text(path, text)
    return path


def page_html(columns: Sequence[str], higher_is_better: Mapping[str, bool],
              rows: Sequence[Tuple[str, Sequence[float]]], means: Mapping[str, float],
              files: Mapping[str, Mapping[str, Sequence[str]]], title: str, notes: Sequence[str] = ()) -> str:
    """The page's text (see write_page)."""
    e = html.escape
    head = ['<th scope="col" data-type="text" aria-sort="none"><button type="button">name</button></th>']
    for c in columns:
        up = higher_is_better.get(c, True)
        head.append(f'<th scope="col" data-type="number" data-higher="{int(up)}" aria-sort="none" '
                    f'title="{"higher" if up else "lower"} is better"><button type="button">{e(c)} '
                    f'<span class="dir">{"&uarr;" if up else "&darr;"}</span></button></th>')
    body = []
    sections = []
    for i, (name, scores) in enumerate(rows):
        item_files = files.get(name, {})
        anchor = f'item-{i}'
        link = f'<a href="#{anchor}">{e(name)}</a>' if item_files.get('output') else e(name)
        cells = [f'<td data-v="{_attr(name)}">{link}</td>']
        for v in scores:
            shown, key = _number(float(v))
            cells.append(f'<td data-v="{key}">{shown}</td>')
        body.append(f'<tr>{"".join(cells)}</tr>')
        if item_files.get('output'):
            sections.append(_item_section(anchor, name, columns, scores, item_files))
    mean_cells = [f'<th scope="row">mean ({int(means.get("count", len(rows)))})</th>']
    mean_cells += [f'<td>{_number(float(means[c]))[0]}</td>' for c in columns]
    note_lines = ''.join(f'<p class="note">{e(n)}</p>' for n in notes)
    table = _TABLE.format(head=''.join(head), body='\n'.join(body), mean=''.join(mean_cells)) if columns else ''
    return _TEMPLATE.format(title=e(title), notes=note_lines, table=table, sections='\n'.join(sections), css=_CSS,
                            js=_JS)


def _item_section(anchor: str, name: str, columns: Sequence[str], scores: Sequence[float],
                  files: Mapping[str, Sequence[str]]) -> str:
    e = html.escape
    frames = {k: [_url(p) for p in files[k]] for k in KINDS if files.get(k)}
    n = len(frames['output'])
    pairs = [(a, b) for a, b in (('input', 'output'), ('output', 'target')) if a in frames and b in frames]
    left, right = pairs[0] if pairs else (None, 'output')
    modes = ''.join(
        f'<label><input type="radio" name="mode-{anchor}" value="{a}|{b}"{" checked" if k == 0 else ""}> '
        f'{a} | {b}</label>' for k, (a, b) in enumerate(pairs))
    score_text = ' &middot; '.join(f'{e(c)} {_number(float(v))[0]}' for c, v in zip(columns, scores))
    left_img = (f'<img class="left" src="{_attr(frames[left][0])}" alt="{_attr(left)}" loading="lazy" '
                f'draggable="false">' if left else '')
    lenses = ''.join(f'<figure><div class="lens" data-kind="{k}"></div><figcaption>{k}</figcaption></figure>'
                     for k in KINDS if k in frames)
    strip = ''
    if n > 1:
        thumbs = ''.join(f'<button type="button" class="frame{" on" if t == 0 else ""}" data-frame="{t}" '
                         f'title="frame {t}"><img src="{_attr(src)}" alt="frame {t}" loading="lazy"></button>'
                         for t, src in enumerate(frames['output']))
        strip = f'<div class="strip" aria-label="frames">{thumbs}</div>'
    frame_label = f' <span class="frameno">frame 0 of {n}</span>' if n > 1 else ''
    return f'''<section class="item" id="{anchor}" data-frames="{_attr(json.dumps(frames))}">
<h2>{e(name)}{frame_label}</h2>
{f'<p class="scores">{score_text}</p>' if score_text else ''}
<div class="controls">{modes}<label>zoom <select class="factor"><option>2</option><option selected>4</option><option>8</option></select></label>
<span class="hint">{'drag the bar (or the range below) to move the split; ' if pairs else ''}click the image to magnify a region</span></div>
<div class="compare">
<div class="viewer{' single' if not pairs else ''}">
<img class="right" src="{_attr(frames[right][0])}" alt="{_attr(right)}" loading="lazy" draggable="false">{left_img}
<span class="label l">{e(left or '')}</span><span class="label r">{e(right)}</span>
<div class="handle" title="drag"></div><div class="box" hidden></div>
</div>
<input type="range" class="split" min="0" max="1000" value="500" aria-label="split position"{'' if pairs else ' hidden'}>
</div>
<div class="zoom" hidden>{lenses}</div>
{strip}
</section>'''


_CSS = '''
body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#222;background:#fafafa}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:0 0 2px;word-break:break-all}
.note{margin:2px 0;color:#555}
table{border-collapse:collapse;margin:12px 0 24px;background:#fff}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right;font-variant-numeric:tabular-nums}
td:first-child,th:first-child{text-align:left;word-break:break-all}
thead th button{font:inherit;font-weight:600;border:0;background:none;cursor:pointer;padding:0}
th[aria-sort=ascending] button::after{content:" \\25B2"}th[aria-sort=descending] button::after{content:" \\25BC"}
.dir{color:#888;font-weight:400}tfoot th,tfoot td{font-weight:600;background:#f0f0f0}
.item{background:#fff;border:1px solid #ddd;padding:10px;margin:0 0 16px}
.scores{margin:0 0 6px;color:#555}.controls{display:flex;gap:14px;align-items:center;flex-wrap:wrap;margin:4px 0}
.hint{color:#888}.frameno{font-weight:400;color:#666;font-size:13px}
.compare{display:inline-block;max-width:100%}
.viewer{position:relative;display:inline-block;max-width:100%;line-height:0;cursor:crosshair;user-select:none;overflow:hidden;
touch-action:none;background:#000}
.viewer img{display:block;max-width:100%;height:auto}
.viewer img.left{position:absolute;left:0;top:0;width:100%;height:100%;clip-path:inset(0 50% 0 0)}
.viewer.pixelated img{image-rendering:pixelated}
.handle{position:absolute;top:0;bottom:0;left:50%;width:14px;margin-left:-7px;cursor:ew-resize}
.handle::before{content:"";position:absolute;top:0;bottom:0;left:6px;width:2px;background:#fff;
box-shadow:0 0 2px #000}
.viewer.single .handle,.viewer.single .label.l{display:none}
.label{position:absolute;top:4px;padding:1px 5px;font:12px/1.4 system-ui,sans-serif;background:rgba(0,0,0,.55);
color:#fff;pointer-events:none}.label.l{left:4px}.label.r{right:4px}
.box{position:absolute;border:1px solid #ff0;box-shadow:0 0 0 1px #000;pointer-events:none}
.split{display:block;width:100%;margin:4px 0 0}
.zoom{display:flex;gap:10px;margin:8px 0}.zoom[hidden]{display:none}.zoom figure{margin:0}
.lens{width:192px;height:192px;border:1px solid #999;background-color:#000;background-repeat:no-repeat;
image-rendering:pixelated}
figcaption{text-align:center;color:#555}
.strip{display:flex;gap:4px;overflow-x:auto;margin:8px 0 0;padding-bottom:4px}
.frame{padding:0;border:2px solid transparent;background:none;cursor:pointer;line-height:0}
.frame.on{border-color:#06c}.frame img{height:48px;width:auto}
'''

# The behaviour: sorting, the slider, the magnifier, the frames. Plain DOM, no library; works from file://.
_JS = r'''
(function () {
  "use strict";
  // --- the table: a click on a header sorts the items by that column (numbers numerically, best first on the
  // first click, reversed on the next); the mean row is in <tfoot>, so it stays last
  var table = document.getElementById("scores");  // none when nothing was scored
  var heads = table ? table.tHead.rows[0].cells : [];
  Array.prototype.forEach.call(heads, function (th, col) {
    th.querySelector("button").addEventListener("click", function () {
      var numeric = th.dataset.type === "number";
      var was = th.getAttribute("aria-sort");
      var first = numeric ? (th.dataset.higher === "1" ? "descending" : "ascending") : "ascending";
      var order = was === "none" ? first : (was === "ascending" ? "descending" : "ascending");
      Array.prototype.forEach.call(heads, function (h) { h.setAttribute("aria-sort", "none"); });
      th.setAttribute("aria-sort", order);
      var sign = order === "ascending" ? 1 : -1;
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      rows.forEach(function (r, i) { if (r.dataset.i === undefined) r.dataset.i = i; });
      rows.sort(function (a, b) {
        var x = a.cells[col].dataset.v, y = b.cells[col].dataset.v, d;
        if (numeric) {
          x = parseFloat(x); y = parseFloat(y);
          if (isNaN(x) || isNaN(y)) d = isNaN(x) - isNaN(y);  // NaN last either way
          else d = sign * (x < y ? -1 : x > y ? 1 : 0);
        } else {
          d = sign * x.localeCompare(y, undefined, {numeric: true});
        }
        return d || a.dataset.i - b.dataset.i;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });

  // --- one item: slider, magnifier, frames
  function setup(item) {
    var frames = JSON.parse(item.dataset.frames);
    var viewer = item.querySelector(".viewer"), right = viewer.querySelector("img.right");
    var left = viewer.querySelector("img.left"), handle = viewer.querySelector(".handle");
    var box = viewer.querySelector(".box"), range = item.querySelector(".split");
    var zoom = item.querySelector(".zoom"), factor = item.querySelector(".factor");
    var labelL = viewer.querySelector(".label.l"), labelR = viewer.querySelector(".label.r");
    var state = {frame: 0, split: 0.5, point: null, left: left ? left.alt : null, right: right.alt};

    function showSplit() {
      var p = (state.split * 100).toFixed(2) + "%";
      if (left) left.style.clipPath = "inset(0 " + (100 - state.split * 100).toFixed(2) + "% 0 0)";
      handle.style.left = p;
      range.value = Math.round(state.split * 1000);
    }
    function showImages() {
      right.src = frames[state.right][state.frame];
      right.alt = state.right; labelR.textContent = state.right;
      if (left) { left.src = frames[state.left][state.frame]; left.alt = state.left; labelL.textContent = state.left; }
      var no = item.querySelector(".frameno");
      if (no) no.textContent = "frame " + state.frame + " of " + frames.output.length;
      item.querySelectorAll(".frame").forEach(function (b) {
        b.classList.toggle("on", +b.dataset.frame === state.frame);
      });
      showZoom();
    }
    // the region around state.point for every kind of image, magnified `factor` times the image's pixels or, where
    // the viewer shows them enlarged already, its view
    function showZoom() {
      if (!state.point || !right.naturalWidth) { zoom.hidden = true; box.hidden = true; return; }
      var w = right.naturalWidth, h = right.naturalHeight, scale = right.getBoundingClientRect().width / w;
      var z = factor.value * Math.max(1, scale);
      zoom.hidden = false;
      var lenses = zoom.querySelectorAll(".lens"), lw = lenses[0].clientWidth, lh = lenses[0].clientHeight;
      lenses.forEach(function (lens) {  // the chosen pixel at the lens's centre
        lens.style.backgroundImage = 'url("' + frames[lens.dataset.kind][state.frame] + '")';
        lens.style.backgroundSize = (w * z) + "px " + (h * z) + "px";
        lens.style.backgroundPosition = (lw / 2 - state.point[0] * z) + "px " + (lh / 2 - state.point[1] * z) + "px";
      });
      box.style.width = (lw / z * scale) + "px"; box.style.height = (lh / z * scale) + "px";
      box.style.left = ((state.point[0] - lw / z / 2) * scale) + "px";
      box.style.top = ((state.point[1] - lh / z / 2) * scale) + "px";
      box.hidden = false;
    }
    function fit() {  // small images shown enlarged by a whole factor, pixels kept sharp
      var w = right.naturalWidth;
      if (!w) return;
      var k = Math.max(1, Math.floor(384 / w));
      viewer.classList.toggle("pixelated", k > 1);
      right.style.width = (w * k) + "px";
      showZoom();
    }
    right.addEventListener("load", fit);
    if (right.complete) fit();

    var dragging = false;
    function fraction(ev) {
      var r = viewer.getBoundingClientRect();
      return [Math.min(Math.max((ev.clientX - r.left) / r.width, 0), 1),
              Math.min(Math.max((ev.clientY - r.top) / r.height, 0), 1)];
    }
    viewer.addEventListener("pointerdown", function (ev) {
      viewer.setPointerCapture(ev.pointerId);
      dragging = left && (ev.target === handle);
      move(ev);
      ev.preventDefault();
    });
    function move(ev) {
      var f = fraction(ev);
      if (dragging) { state.split = f[0]; showSplit(); return; }
      state.point = [f[0] * right.naturalWidth, f[1] * right.naturalHeight];
      showZoom();
    }
    viewer.addEventListener("pointermove", function (ev) { if (viewer.hasPointerCapture(ev.pointerId)) move(ev); });
    viewer.addEventListener("pointerup", function (ev) { viewer.releasePointerCapture(ev.pointerId); dragging = false; });
    range.addEventListener("input", function () { state.split = range.value / 1000; showSplit(); });
    factor.addEventListener("change", showZoom);
    item.querySelectorAll(".controls input[type=radio]").forEach(function (radio) {
      radio.addEventListener("change", function () {
        var pair = radio.value.split("|");
        state.left = pair[0]; state.right = pair[1];
        showImages();
      });
    });
    item.querySelectorAll(".frame").forEach(function (b) {
      b.addEventListener("click", function () { state.frame = +b.dataset.frame; showImages(); });
    });
    window.addEventListener("resize", showZoom);
    showSplit();
  }
  document.querySelectorAll("section.item").forEach(setup);
})();
'''

_TABLE = '''<table id="scores">
<thead><tr>{head}</tr></thead>
<tbody>
{body}
</tbody>
<tfoot><tr>{mean}</tr></tfoot>
</table>'''

_TEMPLATE = '''<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
<h1>{title}</h1>
{notes}
{table}
<main>
{sections}
</main>
<script>{js}</script>
</body>
</html>
'''
