// Opens tollgate's live page (GET /admin/ui) in headless Chromium, waits until every chart has
// drawn `min_draws` times, writes a screenshot and prints what the page shows as one JSON line,
// with the console errors, every URL the page requested and the navigation timing.
// For tests/integration/e2e/test_admin_ui.py:
//   node ui_check.js URL SCREENSHOT_PATH [min_draws=3] [timeout_ms=30000]
// CHROMIUM names the browser (default /usr/bin/chromium, Debian's `chromium`).
'use strict';
const {chromium} = require('playwright-core');

// What the page shows, read from the DOM as a user would see it (runs in the page).
function readPage() {
  const text = (id) => document.getElementById(id).textContent;
  const rows = (id) => [...document.querySelectorAll('#' + id + ' tbody tr')].map(
      (tr) => [...tr.cells].map((td) => td.textContent));
  // Pixels a chart painted: a canvas left blank has none.
  const painted = (c) => {
    const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; i < data.length; i += 4) if (data[i] !== 0) n++;
    return n;
  };
  return {
    config_version: text('config-version'),
    store: text('store-status'),
    key_source: text('keys-status'),
    error: text('error'),
    rates: rows('rates'),
    top_keys: rows('top-keys'),
    top_addresses: rows('top-addresses'),
    usage: rows('usage'),
    charts: [...document.querySelectorAll('canvas[data-chart]')].map((c) => ({
      chart: c.dataset.chart, label: c.getAttribute('aria-label'),
      drawn: Number(c.dataset.drawn), painted: painted(c)})),
    images: document.querySelectorAll('img').length,
    scripts: document.scripts.length,
    pwned: window.__pwned === undefined ? null : String(window.__pwned),
  };
}

async function main() {
  const [url, screenshot, minDraws = '3', timeoutMs = '30000'] = process.argv.slice(2);
  if (!url || !screenshot) throw new Error('usage: node ui_check.js URL SCREENSHOT_PATH [draws] [ms]');
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await browser.newPage({viewport: {width: 1280, height: 900}});
    const consoleErrors = [];
    const requests = [];
    page.on('console', (m) => {
      if (m.type() === 'error') consoleErrors.push(m.text());
    });
    page.on('pageerror', (e) => consoleErrors.push('pageerror: ' + String(e)));
    page.on('request', (r) => requests.push(r.url()));
    await page.goto(url, {waitUntil: 'load'});
    await page.waitForFunction((draws) => {
      const charts = [...document.querySelectorAll('canvas[data-chart]')];
      return charts.length >= 2 && charts.every((c) => Number(c.dataset.drawn) >= draws);
    }, Number(minDraws), {timeout: Number(timeoutMs), polling: 100});
    const timing = await page.evaluate(() => {
      const n = performance.getEntriesByType('navigation')[0];
      const ms = (x) => Math.round(x * 10) / 10;
      return {request_to_response_end_ms: ms(n.responseEnd - n.requestStart),
              dom_content_loaded_ms: ms(n.domContentLoadedEventEnd - n.startTime),
              load_ms: ms(n.loadEventEnd - n.startTime)};
    });
    await page.screenshot({path: screenshot, fullPage: true});
    const shown = await page.evaluate(readPage);
    // The first navigation of a new browser pays for starting its renderer: five reloads give
    // the page's own load time (docs/benchmarks.md, "Admin page load").
    timing.reload_load_ms = [];
    for (let i = 0; i < 5; i++) {
      await page.reload({waitUntil: 'load'});
      timing.reload_load_ms.push(await page.evaluate(() => {
        const n = performance.getEntriesByType('navigation')[0];
        return Math.round((n.loadEventEnd - n.startTime) * 10) / 10;
      }));
    }
    process.stdout.write(JSON.stringify({shown, timing, console_errors: consoleErrors, requests}) + '\n');
  } finally {
    await browser.close();
  }
}

main().catch((e) => {
  process.stderr.write((e && e.stack) || String(e));
  process.stderr.write('\n');
  process.exit(1);
});
