// Written by cordon for one run: Node's `fetch` through the sandbox's
// proxy. Node before 22.21 does not read the proxy variables for `fetch`
// (22.21 and 24 do, with NODE_USE_ENV_PROXY=1, which cordon sets), and
// the sandbox has no DNS of its own, so without this `fetch` cannot reach
// anything. It swaps fetch's default dispatcher for one of the same class
// whose connections are CONNECT tunnels through $https_proxy.
'use strict';
(() => {
  const proxy = process.env.https_proxy || process.env.HTTPS_PROXY;
  const [major, minor] = process.versions.node.split('.').map(Number);
  if (!proxy || typeof fetch !== 'function' || major > 22 || (major === 22 && minor >= 21)) {
    return;
  }
  const key = Symbol.for('undici.globalDispatcher.1');
  const original = globalThis.fetch;
  let installed = false;
  // Installed on the first call, so a program that never fetches pays
  // nothing: fetch makes its default dispatcher then, and a request that
  // fails at once (port 0) makes it, to take its class.
  globalThis.fetch = function fetch(...args) {
    if (!installed) {
      installed = true;
      if (!globalThis[key]) original('http://127.0.0.1:0/').catch(() => {});
      const Agent = globalThis[key] && globalThis[key].constructor;
      if (typeof Agent === 'function') globalThis[key] = new Agent({ connect });
    }
    return original.apply(this, args);
  };
  const net = require('net');
  const tls = require('tls');
  const via = new URL(proxy);
  const connect = (opts, callback) => {
    let done = false;
    const finish = (err, socket) => {
      if (!done) {
        done = true;
        callback(err, socket);
      }
    };
    const https = opts.protocol === 'https:';
    const port = opts.port || (https ? 443 : 80);
    const target = `${opts.hostname.includes(':') ? `[${opts.hostname}]` : opts.hostname}:${port}`;
    const socket = net.connect(Number(via.port) || 80, via.hostname);
    socket.once('error', (e) => finish(e));
    socket.once('connect', () => {
      socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
    });
    let head = Buffer.alloc(0);
    const onData = (chunk) => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) {
        if (head.length > 16384) finish(new Error('the proxy answer is too long'));
        return;
      }
      socket.removeListener('data', onData);
      const status = head.subarray(0, head.indexOf('\r\n')).toString();
      if (!/^HTTP\/1\.[01] 200/.test(status)) {
        socket.destroy();
        return finish(new Error(`the proxy refused ${target}: ${status}`));
      }
      if (!https) return finish(null, socket);
      const secure = tls.connect({
        socket,
        servername: opts.servername || (net.isIP(opts.hostname) ? undefined : opts.hostname),
        ALPNProtocols: ['http/1.1'],
      });
      secure.once('error', (e) => finish(e));
      secure.once('secureConnect', () => finish(null, secure));
    };
    socket.on('data', onData);
  };
})();
