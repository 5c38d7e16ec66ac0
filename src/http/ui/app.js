// tollgate's live page (GET /admin/ui): polls GET /admin/ui/data each second and draws it.
// Key ids, accounts, addresses and plan names come from clients and configuration: they reach
// the DOM through textContent and attributes only, never as HTML.
'use strict';
(() => {
  const HISTORY_S = 120;  // the rate charts' span
  const AVERAGE_S = 5;    // the rates table's
  const RESULTS = [
    {field: 'admitted', color: '#2e7d32'},
    {field: 'rejected', color: '#c62828'},
    {field: 'shadow_rejected', color: '#ef8f00'},
  ];
  const polls = [];            // {t (ms), plans: Map(name -> cumulative counters)}
  const rates = new Map();     // plan -> [{t, admitted, rejected, shadow_rejected}] per second
  const charts = new Map();    // plan -> its canvas

  const $ = (id) => document.getElementById(id);
  function cell(row, text, numeric) {
    const td = document.createElement('td');
    td.textContent = text === null || text === undefined ? '\u2014' : String(text);
    if (numeric) td.className = 'num';
    row.appendChild(td);
    return td;
  }
  function fill(tableId, rows, render) {
    const body = $(tableId).tBodies[0];
    const out = rows.map((item) => {
      const tr = document.createElement('tr');
      render(tr, item);
      return tr;
    });
    if (out.length === 0) {
      const tr = document.createElement('tr');
      cell(tr, 'none').colSpan = $(tableId).tHead.rows[0].cells.length;
      out.push(tr);
    }
    body.replaceChildren(...out);
  }
  const rate = (x) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
  const count = (x) => (x === null || x === undefined ? null : Number(x).toLocaleString('en'));
  function duration(s) {
    const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24;
    const m = Math.floor(s / 60) % 60, sec = s % 60;
    return (d ? d + 'd ' : '') + (d || h ? h + 'h ' : '') + (d || h || m ? m + 'm ' : '') + sec + 's';
  }
  function badge(id, status) {
    const e = $(id);
    e.textContent = status;
    e.className = 'badge ' + (status === 'ok' ? 'ok' : 'bad');
  }
  function marked(canvas) {
    canvas.dataset.drawn = String(Number(canvas.dataset.drawn || 0) + 1);
  }
  // A canvas sized to its box in device pixels, its context scaled to CSS pixels.
  function context(canvas, cssHeight) {
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 300;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(cssHeight * ratio);
    canvas.style.height = cssHeight + 'px';
    const g = canvas.getContext('2d');
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, cssHeight);
    g.font = '11px system-ui, sans-serif';
    return {g, width, height: cssHeight};
  }
  function niceMax(x) {
    if (x <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(x)));
    for (const m of [1, 2, 5, 10]) if (m * p >= x) return m * p;
    return 10 * p;
  }

  function recordPoll(data) {
    const plans = new Map(data.decisions.map((d) => [d.plan, d]));
    const prev = polls[polls.length - 1];
    polls.push({t: data.now_ms, plans});
    while (polls.length > AVERAGE_S + 1) polls.shift();
    for (const name of plans.keys()) if (!rates.has(name)) rates.set(name, []);
    if (!prev || data.now_ms <= prev.t) return;
    const dt = (data.now_ms - prev.t) / 1000;
    for (const [name, now] of plans) {
      const before = prev.plans.get(name) || {};
      const point = {t: data.now_ms};
      // A counter that went down (a restart behind the same address) starts again from 0.
      for (const r of RESULTS) point[r.field] = Math.max(0, (now[r.field] - (before[r.field] || 0)) / dt);
      const list = rates.get(name);
      list.push(point);
      while (list.length && list[0].t < data.now_ms - HISTORY_S * 1000) list.shift();
    }
  }
  // Per second over the polls kept (up to AVERAGE_S seconds).
  function averaged(name, field) {
    const first = polls[0], last = polls[polls.length - 1];
    if (!first || first === last) return 0;
    const a = first.plans.get(name), b = last.plans.get(name);
    if (!b) return 0;
    return Math.max(0, (b[field] - (a ? a[field] : 0)) / ((last.t - first.t) / 1000));
  }

  function drawRates(canvas, points, nowMs) {
    const {g, width, height} = context(canvas, 140);
    const left = 40, right = 8, top = 8, bottom = 18;
    const w = width - left - right, h = height - top - bottom;
    let peak = 0;
    for (const p of points) for (const r of RESULTS) peak = Math.max(peak, p[r.field]);
    const max = niceMax(peak);
    g.strokeStyle = '#d8dee6';
    g.fillStyle = '#5f6b7a';
    g.lineWidth = 1;
    g.textAlign = 'right';
    for (let i = 0; i <= 4; i++) {
      const y = top + h - (h * i) / 4;
      g.beginPath();
      g.moveTo(left, y);
      g.lineTo(left + w, y);
      g.stroke();
      g.fillText(rate((max * i) / 4), left - 4, y + 4);
    }
    for (const s of [120, 60, 0]) {
      g.textAlign = s === HISTORY_S ? 'left' : s ? 'center' : 'right';
      g.fillText(s ? '-' + s + 's' : 'now', left + w - (w * s) / HISTORY_S, height - 4);
    }
    const x = (t) => left + w - (w * (nowMs - t)) / (HISTORY_S * 1000);
    const y = (v) => top + h - (h * v) / max;
    g.lineWidth = 2;
    for (const r of RESULTS) {
      g.strokeStyle = r.color;
      g.beginPath();
      points.forEach((p, i) => (i ? g.lineTo(x(p.t), y(p[r.field])) : g.moveTo(x(p.t), y(p[r.field]))));
      if (points.length === 1) g.arc(x(points[0].t), y(points[0][r.field]), 1.5, 0, 2 * Math.PI);
      g.stroke();
    }
    marked(canvas);
  }

  function chartOf(name) {
    let canvas = charts.get(name);
    if (canvas) return canvas;
    const figure = document.createElement('figure');
    const caption = document.createElement('figcaption');
    caption.textContent = name;
    canvas = document.createElement('canvas');
    canvas.dataset.chart = 'rates';
    canvas.dataset.drawn = '0';
    canvas.setAttribute('aria-label', 'decisions per second of plan ' + name);
    figure.append(caption, canvas);
    $('rate-charts').appendChild(figure);
    charts.set(name, canvas);
    return canvas;
  }

  // Two bars per account (today, this month), each on its own scale: used, the allowance
  // (dashed) and the ceiling (solid) marked.
  function drawUsage(canvas, accounts) {
    const shown = accounts.slice(0, 20);
    const rowH = 34, labelW = 150, top = 4;
    const {g, width, height} = context(canvas, Math.max(40, top + shown.length * rowH + 4));
    const w = width - labelW - 115;
    // A period without a quota is drawn muted, against the largest use of that period.
    const largest = (period) => Math.max(1, ...shown.map((a) => a[period].used));
    if (shown.length === 0) {
      g.fillStyle = '#5f6b7a';
      g.fillText('no usage recorded yet', 4, 20);
    }
    shown.forEach((a, i) => {
      const y0 = top + i * rowH;
      g.fillStyle = '#1b1f24';
      g.textAlign = 'left';
      const name = a.key !== null ? a.account + ' / ' + a.key : a.account;
      let label = name;
      while (label.length > 3 && g.measureText(label).width > labelW - 8) label = label.slice(0, -2);
      g.fillText(label === name ? label : label + '\u2026', 4, y0 + 18);
      [['today', 'day'], ['month', 'month']].forEach(([what, period], j) => {
        const p = a[period];
        const y = y0 + j * 15, barH = 12;
        const quota = p.allowance !== null || p.ceiling !== null;
        const scale = quota ? Math.max(p.used, p.allowance || 0, p.ceiling || 0, 1) : largest(period);
        const x = (v) => labelW + (w * v) / scale;
        g.fillStyle = '#eef1f5';
        g.fillRect(labelW, y, w, barH);
        g.fillStyle = !quota ? '#9fb3c8'
                    : p.ceiling !== null && p.used >= p.ceiling ? '#c62828'
                    : p.allowance !== null && p.used > p.allowance ? '#ef8f00' : '#1565c0';
        g.fillRect(labelW, y, x(p.used) - labelW, barH);
        if (p.allowance !== null) {
          g.strokeStyle = '#2e7d32';
          g.setLineDash([3, 2]);
          g.lineWidth = 2;
          g.beginPath();
          g.moveTo(x(p.allowance), y - 1);
          g.lineTo(x(p.allowance), y + barH + 1);
          g.stroke();
          g.setLineDash([]);
        }
        if (p.ceiling !== null) {
          g.fillStyle = '#c62828';
          g.fillRect(x(p.ceiling) - 2, y - 1, 3, barH + 2);
        }
        g.fillStyle = '#5f6b7a';
        g.fillText(quota ? what : what + ' (no quota)', labelW + w + 6, y + 10);
      });
    });
    marked(canvas);
  }

  function render(data) {
    $('config-version').textContent = data.config.version;
    $('config-loaded').textContent = data.config.loaded_at;
    $('uptime').textContent = duration(data.uptime_seconds);
    $('updated').textContent = new Date(data.now_ms).toISOString().slice(11, 19) + 'Z';
    const c = data.connections;
    $('connections').textContent = c.open + ' open; HTTP/2: ' + (c.h2_total + c.h2c_total) +
        ' connections, ' + c.streams_total + ' streams, ' + c.resets_received_total +
        ' resets, ' + c.goaways_sent_total + ' GOAWAYs';
    badge('store-status', data.store.status);
    $('store-status').title = data.store.type + (data.store.last_error ? ': ' + data.store.last_error : '');
    badge('keys-status', data.key_source.status);
    $('keys-status').title = data.key_source.type;

    recordPoll(data);
    for (const d of data.decisions) drawRates(chartOf(d.plan), rates.get(d.plan) || [], data.now_ms);
    fill('rates', data.decisions, (tr, d) => {
      tr.dataset.plan = d.plan;
      cell(tr, d.plan);
      for (const r of RESULTS) cell(tr, rate(averaged(d.plan, r.field)), true).dataset.result = r.field;
      cell(tr, count(d.decided), true);
    });

    $('top-window').textContent = '(rejected, last ' + data.top.window_seconds + ' s' +
                                  (data.top.enabled ? ')' : '; off: server.top_offenders)');
    const top = (id, of) => fill(id, data.top[of === 'key' ? 'keys' : 'addresses'], (tr, item) => {
      cell(tr, item[of]);
      cell(tr, count(item.count), true);
      cell(tr, count(item.error), true);
    });
    top('top-keys', 'key');
    top('top-addresses', 'address');

    const endpoints = [];
    for (const u of data.upstreams) for (const e of u.endpoints) endpoints.push([u, e]);
    fill('upstreams', endpoints, (tr, [u, e]) => {
      tr.dataset.endpoint = e.url;
      cell(tr, u.group + ' (' + u.balance + ')');
      cell(tr, e.url);
      const state = cell(tr, e.state === 'ejected'
        ? 'ejected (' + Math.ceil(e.ejected_ms / 1000) + ' s)' : e.state.replace('_', ' '));
      state.className = 'badge ' + (e.state === 'admitted' ? 'ok' : 'bad');
      state.dataset.state = e.state;
      cell(tr, count(e.outstanding), true);
      cell(tr, count(e.requests), true);
      cell(tr, count(e.ejections), true);
    });

    $('usage-periods').textContent = '(today ' + data.usage.day + ', month ' + data.usage.month + ')' +
                                     (data.usage.error ? ': ' + data.usage.error : '');
    drawUsage($('usage-chart'), data.usage.accounts);
    fill('usage', data.usage.accounts, (tr, a) => {
      cell(tr, a.account);
      cell(tr, a.plan);
      // Whose budget the quotas count: this key, or the account's keys on this plan.
      cell(tr, a.key !== null ? 'key ' + a.key : 'account (' + a.keys + ' keys)');
      for (const p of [a.day, a.month]) {
        cell(tr, count(p.used), true);
        cell(tr, count(p.allowance), true);
        cell(tr, count(p.ceiling), true);
      }
      cell(tr, count(a.month.rejected), true);
    });
  }

  // The admin token (server.admin_token), asked once when a change is refused with 401 and
  // kept for this tab only (sessionStorage); sent as a bearer token, never in a URL.
  const TOKEN_KEY = 'tollgate-admin-token';
  async function change(path) {
    for (let attempt = 0; attempt < 2; ++attempt) {
      const token = sessionStorage.getItem(TOKEN_KEY);
      const headers = token ? {Authorization: 'Bearer ' + token} : {};
      const response = await fetch(path, {method: 'POST', headers, cache: 'no-store'});
      if (response.status !== 401) return response;
      sessionStorage.removeItem(TOKEN_KEY);
      const asked = window.prompt('Admin token (server.admin_token):');
      if (!asked) return response;
      sessionStorage.setItem(TOKEN_KEY, asked.trim());
    }
    return fetch(path, {method: 'POST', cache: 'no-store',
                        headers: {Authorization: 'Bearer ' + sessionStorage.getItem(TOKEN_KEY)}});
  }
  $('reload').addEventListener('click', async () => {
    try {
      const response = await change('/admin/reload');
      const body = await response.json();
      $('reload-result').textContent = response.ok ? 'reloaded'
                                                   : 'reload refused: ' + (body.detail || body.code);
    } catch (e) {
      $('reload-result').textContent = 'reload failed: ' + e.message;
    }
  });

  async function poll() {
    try {
      const response = await fetch('/admin/ui/data', {cache: 'no-store'});
      if (!response.ok) throw new Error('HTTP ' + response.status);
      render(await response.json());
      $('error').textContent = '';
    } catch (e) {
      $('error').textContent = 'refresh failed: ' + e.message;
    } finally {
      setTimeout(poll, 1000);
    }
  }
  poll();
})();
