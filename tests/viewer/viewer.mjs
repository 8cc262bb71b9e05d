// tests/viewer/viewer.mjs PLAN.json RESULTS.json: opens snapshots in
// PyTorch's memory viewer (MemoryViz.js) in Debian's headless Chromium,
// driven by playwright-core, with nothing from the network: the viewer's
// CDN URLs are answered from files on this machine and every other request
// is refused and recorded (a refused request fails the step that made it).
//
// For each case of the plan it runs these steps, and writes what each saw
// (drawn elements, the stack text after hovering a block, console errors,
// refused requests, seconds) to RESULTS.json:
//   page:trace_plot       the page _memory_viz.py trace_plot wrote
//   page:segment_plot     the page _memory_viz.py segment_plot wrote
//   page:trace_plot-s     the page trace_plot -s wrote
//   drop:<view>           the bare viewer page with the pickle dropped on
//                         it (a drop event carrying the file, the path
//                         pytorch.org/memory_viz takes), then each view
//                         chosen in its menu, and each further GPU
// scripts/check-viewer writes the plan and judges the results.
import {createRequire} from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const [planFile, resultsFile] = process.argv.slice(2);
const plan = JSON.parse(fs.readFileSync(planFile, 'utf8'));
const require = createRequire(path.join(plan.node_dir, 'package.json'));
const {chromium} = require('playwright-core');

// What the pages ask for, answered from this machine.
const MEMORYVIZ_URL =
  'https://cdn.jsdelivr.net/gh/pytorch/pytorch@main/torch/utils/viz/MemoryViz.js';
const SKYPACK = 'https://cdn.skypack.dev/';
const PAGES = 'https://check-viewer.invalid/';
const BARE_URL = 'https://pytorch.org/memory_viz';
// The bare viewer: the page pytorch.org/memory_viz serves loads the same
// module, which puts up its menus and the drop target.
const BARE_PAGE = `<!DOCTYPE html><html><head></head><body>
<script type="module">import "${MEMORYVIZ_URL}";</script></body></html>`;
const SKYPACK_MODULES = {
  'd3@5': 'd3.js',
  'd3-axis@1': 'd3-axis.js',
  'd3-scale@1': 'd3-scale.js',
  'd3-zoom@1': 'd3-zoom.js',
  'd3-brush@1': 'd3-brush.js',
};

function answer(url) {
  const js = 'text/javascript; charset=utf-8';
  if (url === MEMORYVIZ_URL) {
    return {path: plan.memoryviz_js, contentType: js};
  }
  if (url.startsWith(SKYPACK)) {
    const name = url.slice(SKYPACK.length);
    const file = SKYPACK_MODULES[name] || (/^chunk-[A-Z0-9]+\.js$/.test(name) ? name : null);
    return file ? {path: path.join(plan.cdn_dir, file), contentType: js} : null;
  }
  if (url === BARE_URL) {
    return {body: BARE_PAGE, contentType: 'text/html; charset=utf-8'};
  }
  if (url.startsWith(PAGES)) {
    const rel = decodeURIComponent(url.slice(PAGES.length));
    const file = path.join(plan.pages_dir, rel);
    if (!rel.includes('..') && fs.existsSync(file)) {
      return {path: file, contentType: 'text/html; charset=utf-8'};
    }
  }
  return null;
}

function normalise(msg) {
  return msg.split('\n')[0].replace(/0x[0-9a-f]+|\d+/gi, 'N').slice(0, 300);
}

// Waits until the shown view has drawn `selector` elements, an exception
// was thrown since the step's errorsBefore-th, or the time is up.
async function waitDrawn(page, state, selector, seconds, errorsBefore) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const n = await page.evaluate(sel => {
      const shown = Array.from(document.querySelectorAll('body > div')).filter(
        d => d.style.display !== 'none' && d.querySelector('svg, pre, p'),
      );
      return shown.reduce((k, d) => k + d.querySelectorAll(sel).length, 0);
    }, selector);
    if (n > 0) return n;
    if (state.refused.length > 0) return 0; // a module it needs was refused
    if (state.errors.length > errorsBefore || Date.now() > deadline) return 0;
    await page.waitForTimeout(200);
  }
}

// Moves the mouse onto the largest block of the shown view that is
// on top at its centre (a real hover: d3's mouseover handlers run), and
// returns the text the viewer shows for it.
async function hoverBlock(page, kind) {
  const point = await page.evaluate(kind => {
    const shown = Array.from(document.querySelectorAll('body > div')).find(
      d => d.style.display !== 'none' && d.querySelector('svg'),
    );
    if (!shown) return null;
    const els = Array.from(shown.querySelectorAll(kind === 'timeline' ? 'polygon' : 'rect')).filter(e => {
      const d = e.__data__;
      if (!d) return false;
      return kind === 'timeline' ? d.elem !== 'summarized' : d.segment !== undefined && 'requested_size' in d;
    });
    const boxes = els
      .map(e => ({e, r: e.getBoundingClientRect()}))
      .filter(({r}) => r.width > 0 && r.height > 0)
      .sort((a, b) => b.r.width * b.r.height - a.r.width * a.r.height);
    for (const {e, r} of boxes.slice(0, 200)) {
      for (const [fx, fy] of [[0.5, 0.5], [0.25, 0.5], [0.75, 0.5], [0.5, 0.25], [0.5, 0.75]]) {
        const x = r.left + r.width * fx, y = r.top + r.height * fy;
        if (document.elementFromPoint(x, y) === e) return {x, y, candidates: els.length};
      }
    }
    // None is on top anywhere the mouse could reach (thousands of
    // sub-pixel slivers): the largest gets the event the mouse would send.
    if (boxes.length > 0) {
      boxes[0].e.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
      return {x: null, dispatched: true, candidates: els.length};
    }
    return {x: null, candidates: els.length};
  }, kind);
  if (point && point.dispatched) {
    await page.waitForTimeout(100);
  } else if (!point || point.x === null) {
    return {hovered: false, candidates: point ? point.candidates : 0, text: ''};
  } else {
    await page.mouse.move(point.x, point.y);
  }
  await page.waitForTimeout(100);
  const text = await page.evaluate(() => {
    const shown = Array.from(document.querySelectorAll('body > div')).find(d => d.style.display !== 'none');
    return Array.from(shown.querySelectorAll('pre'))
      .map(p => p.textContent)
      .join('\n');
  });
  return {hovered: point.dispatched ? 'dispatched' : true, candidates: point.candidates, text: text.slice(0, 4000)};
}

const VIEWS = {
  'Active Memory Timeline': {draw: 'polygon', hover: 'timeline'},
  'Allocator State History': {draw: 'rect', hover: 'segment'},
  'Active Cached Segment Timeline': {draw: 'polygon', hover: 'timeline'},
  'Allocator Settings': {draw: 'pre', hover: null},
};

async function measure(page, state, step, view, seconds, shot, errorsBefore = 0) {
  const t0 = Date.now();
  const spec = VIEWS[view];
  step.view = view;
  step.drawn = await waitDrawn(page, state, spec.draw, seconds, errorsBefore);
  if (step.drawn > 0 && spec.hover) {
    Object.assign(step, await hoverBlock(page, spec.hover));
  }
  if (shot) {
    step.screenshot = shot;
    await page.screenshot({path: shot});
  }
  step.seconds_drawing = (Date.now() - t0) / 1000;
}

async function runCase(context, c) {
  const steps = [];
  const add = async (label, fn) => {
    const page = await context.newPage();
    const state = {errors: [], refused: []};
    page.on('pageerror', e => state.errors.push(`${e.name}: ${e.message}`));
    page.on('console', m => {
      if (m.type() === 'error') state.errors.push(m.text());
    });
    page.on('requestfailed', r => {
      if (!state.refused.includes(r.url())) state.refused.push(`${r.url()} (${r.failure()?.errorText})`);
    });
    await page.route('**/*', async route => {
      const url = route.request().url();
      const a = answer(url);
      if (a) {
        await route.fulfill({status: 200, headers: {'Access-Control-Allow-Origin': '*'}, ...a});
      } else {
        state.refused.push(url);
        await route.abort('blockedbyclient');
      }
    });
    const step = {case: c.name, step: label};
    const t0 = Date.now();
    try {
      await fn(page, state, step);
    } catch (e) {
      step.driver_error = String(e).split('\n')[0];
    }
    step.seconds = (Date.now() - t0) / 1000;
    step.errors = state.errors.map(normalise);
    step.errors_raw = state.errors.slice(0, 5).map(s => s.slice(0, 500));
    step.refused = state.refused;
    steps.push(step);
    await page.close();
  };
  const shotDir = plan.shots_dir;
  const shot = label => (c.screenshots ? path.join(shotDir, `${c.name}-${label.replace(/[^a-z0-9]+/gi, '_')}.png`) : null);
  const T = c.seconds || 60;

  for (const [label, file, view] of [
    ['page:trace_plot', c.trace_plot, 'Active Memory Timeline'],
    ['page:segment_plot', c.segment_plot, 'Allocator State History'],
    // trace_plot -s: the segments' timeline
    ['page:trace_plot-s', c.trace_plot_s, 'Active Cached Segment Timeline'],
  ]) {
    if (!file) continue;
    await add(label, async (page, state, step) => {
      await page.goto(PAGES + encodeURIComponent(path.relative(plan.pages_dir, file)), {waitUntil: 'load', timeout: T * 1000});
      await measure(page, state, step, view, T, shot(label));
    });
  }

  await add('drop', async (page, state, step) => {
    await page.goto(BARE_URL, {waitUntil: 'load'});
    await page.waitForFunction(() => document.querySelectorAll('select').length === 3, null, {timeout: 20000});
    const bytes = fs.readFileSync(c.pickle).toString('base64');
    const dt = await page.evaluateHandle(
      ([b64, name]) => {
        const bin = atob(b64);
        const u8 = new Uint8Array(bin.length);
        for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);
        const dt = new DataTransfer();
        dt.items.add(new File([u8], name, {type: 'application/octet-stream'}));
        return dt;
      },
      [bytes, path.basename(c.pickle)],
    );
    await page.dispatchEvent('body', 'dragover', {dataTransfer: dt});
    await page.dispatchEvent('body', 'drop', {dataTransfer: dt});
    step.devices = [];
    const substeps = [];
    for (const view of Object.keys(VIEWS)) {
      if (view !== 'Active Memory Timeline') {
        await page.selectOption('body > select:nth-of-type(2)', view);
      }
      const sub = {case: c.name, step: `drop:${view}`};
      const errorsBefore = state.errors.length;
      const keep = view === 'Active Memory Timeline' || view === 'Allocator State History';
      await measure(page, state, sub, view, T, keep ? shot(`drop ${view}`) : null, errorsBefore);
      sub.errors = state.errors.slice(errorsBefore).map(normalise);
      sub.errors_raw = state.errors.slice(errorsBefore, errorsBefore + 5).map(s => s.slice(0, 500));
      substeps.push(sub);
      if (state.errors.length > errorsBefore && sub.drawn === 0) break; // the snapshot did not load
    }
    // each further GPU, on the timeline
    const gpus = await page.$$eval('body > select:nth-of-type(3) option', os => os.map(o => o.textContent));
    step.devices = gpus;
    for (const g of gpus.slice(1)) {
      await page.selectOption('body > select:nth-of-type(2)', 'Active Memory Timeline');
      await page.selectOption('body > select:nth-of-type(3)', g);
      const sub = {case: c.name, step: `drop:Active Memory Timeline:gpu${g}`};
      const errorsBefore = state.errors.length;
      await measure(page, state, sub, 'Active Memory Timeline', T, null, errorsBefore);
      sub.errors = state.errors.slice(errorsBefore).map(normalise);
      substeps.push(sub);
    }
    step.substeps = substeps;
  });
  // the drop's views are steps of their own in the results
  const out = [];
  for (const s of steps) {
    if (s.substeps) {
      for (const sub of s.substeps) {
        sub.refused = s.refused;
        sub.seconds = sub.seconds_drawing;
        out.push(sub);
      }
      if (s.driver_error || s.substeps.length === 0) {
        out.push({case: c.name, step: 'drop', driver_error: s.driver_error, errors: s.errors, errors_raw: s.errors_raw, refused: s.refused, drawn: 0});
      }
    } else {
      out.push(s);
    }
  }
  return out;
}

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cucache-viewer-chromium-'));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
  ],
  viewport: {width: 1280, height: 800},
});
const results = [];
try {
  for (const c of plan.cases) {
    const t0 = Date.now();
    const r = await runCase(context, c);
    results.push(...r);
    fs.writeFileSync(resultsFile, JSON.stringify(results, null, 1));
    console.log(`viewer: ${c.name}: ${r.length} steps in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }
} finally {
  await context.close();
  fs.rmSync(userDataDir, {recursive: true, force: true});
}
