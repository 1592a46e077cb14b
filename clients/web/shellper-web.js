// The browser's half of tower_client.web (protocol/WEB.md): one session in an xterm.js Terminal.
//
// It keeps the offset of the last output xterm.js has rendered, and after the websocket drops it reconnects
// from there, so it gets exactly what it missed: no byte twice, none lost. A plain script (no bundler):
// load xterm.js first, then this; it defines window.ShellperWeb.
(function (global) {
  'use strict';

  const OUTPUT = 0; // stream bytes from the message's offset on
  const DRAW = 1; // the screen drawn: reset, write, continue at the message's offset
  const CLOSE_ENDED = 4000; // the session ended: do not reconnect
  const CLOSE_REFUSED = 4003; // a bad name or role, or not allowed: do not reconnect

  // attach(element, {url, name, role, cols, rows, scrollback, keep}): url is the websocket prefix
  // ("ws://host/ws/"); role "terminal" types and resizes, "viewer" only watches. cols/rows: the terminal's
  // size (a terminal gives it to the session); without them, a FitAddon (if loaded) fits the element.
  // keep: remember every output byte (tests compare them with the session's ring).
  function attach(element, options) {
    const role = options.role || 'viewer';
    const term = new global.Terminal({
      cols: options.cols || 80, rows: options.rows || 24,
      scrollback: options.scrollback === undefined ? 1000 : options.scrollback,
    });
    term.open(element);
    let fit = null;
    if (!options.cols && global.FitAddon) {
      fit = new global.FitAddon.FitAddon();
      term.loadAddon(fit);
      fit.fit();
      global.addEventListener('resize', () => fit.fit());
    }
    const state = {
      offset: null, instance: null, connected: false, ended: null, closeCode: null, reconnects: 0, draws: 0,
      holes: 0, dups: 0, bytes: 0, messages: 0, kept: options.keep ? [] : null, keptFrom: null,
    };
    const encoder = new TextEncoder();
    let ws = null;
    let backoff = 250;
    let expected = null; // where the next OUTPUT must start: checked, never assumed
    let applying = false; // a size the session said, not the user's: not sent back
    let closing = false;

    function address() {
      const query = new URLSearchParams({role: role});
      if (state.offset !== null) {
        query.set('from', String(state.offset));
        if (state.instance) query.set('instance', state.instance);
      }
      query.set('cols', String(term.cols));
      query.set('rows', String(term.rows));
      return options.url + encodeURIComponent(options.name) + '?' + query;
    }

    function control(message) {
      if (message.type === 'welcome') {
        state.instance = message.instance;
        state.connected = true;
        backoff = 250;
        sessionSize(message.cols, message.rows);
      } else if (message.type === 'resize') {
        sessionSize(message.cols, message.rows);
      } else if (message.type === 'ended') {
        state.ended = message.reason;
      }
      if (options.onControl) options.onControl(message);
    }

    function sessionSize(cols, rows) {
      if (cols === term.cols && rows === term.rows) return;
      applying = true;
      try { term.resize(cols, rows); } finally { applying = false; }
    }

    function output(buffer) {
      const view = new DataView(buffer);
      const kind = view.getUint8(0);
      const offset = view.getUint32(1) * 4294967296 + view.getUint32(5);
      const data = new Uint8Array(buffer, 9);
      if (kind === DRAW) {
        state.draws += 1;
        expected = offset;
        term.reset();
        term.write(data, () => { state.offset = offset; });
        if (state.kept) { state.kept = []; state.keptFrom = offset; }
        return;
      }
      if (expected !== null && offset > expected) state.holes += 1;
      if (expected !== null && offset < expected) state.dups += 1;
      expected = offset + data.length;
      state.bytes += data.length;
      state.messages += 1;
      if (state.kept) {
        if (state.keptFrom === null) state.keptFrom = offset;
        state.kept.push(data);
      }
      term.write(data, () => { state.offset = offset + data.length; });
    }

    function connect() {
      ws = new WebSocket(address());
      ws.binaryType = 'arraybuffer';
      ws.onmessage = (event) => {
        if (typeof event.data === 'string') control(JSON.parse(event.data));
        else output(event.data);
      };
      ws.onclose = (event) => {
        ws = null;
        state.connected = false;
        state.closeCode = event.code;
        if (closing || event.code === CLOSE_ENDED || event.code === CLOSE_REFUSED) {
          if (state.ended === null) state.ended = event.reason || String(event.code);
          return;
        }
        state.reconnects += 1;
        const delay = backoff;
        backoff = Math.min(backoff * 2, 5000);
        // What xterm.js still has queued is rendered first: the offset asked from is then all it shows.
        setTimeout(() => term.write('', connect), delay);
      };
    }

    function send(data) {
      if (role === 'terminal' && ws !== null && ws.readyState === WebSocket.OPEN) {
        ws.send(typeof data === 'string' ? encoder.encode(data) : data);
      }
    }

    term.onData((data) => send(data));
    term.onBinary((data) => send(Uint8Array.from(data, (c) => c.charCodeAt(0))));
    term.onResize(({cols, rows}) => {
      if (!applying && role === 'terminal' && ws !== null && ws.readyState === WebSocket.OPEN) {
        ws.send(JSON.stringify({type: 'resize', cols: cols, rows: rows}));
      }
    });
    connect();

    return {
      term: term,
      state: state,
      send: send,
      resize: (cols, rows) => term.resize(cols, rows),
      close: () => { closing = true; if (ws !== null) ws.close(); },
      // What the screen shows, a line per row, as `shellper screen` prints it.
      screen: () => {
        const buffer = term.buffer.active;
        const rows = [];
        for (let y = 0; y < term.rows; y++) {
          const line = buffer.getLine(buffer.viewportY + y);
          rows.push(line ? line.translateToString(true) : '');
        }
        return rows;
      },
      // The kept output as base64, with the offset it starts at.
      kept: () => {
        let text = '';
        for (const chunk of state.kept || []) {
          for (let i = 0; i < chunk.length; i += 0x8000) {
            text += String.fromCharCode.apply(null, chunk.subarray(i, i + 0x8000));
          }
        }
        return {from: state.keptFrom, data: btoa(text)};
      },
    };
  }

  global.ShellperWeb = {attach: attach};
})(window);
