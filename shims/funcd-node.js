'use strict';
// funcd-node: the node runtime's worker (docs/worker-contract.md). Serves the
// handler named by FUNCD_HANDLER ("file.js#export", export defaults to
// "handler") over HTTP/1.1 keep-alive on the Unix socket FUNCD_LISTEN.
//
//   FUNCD_LISTEN=/path/worker.sock FUNCD_HANDLER=index.js#handler FUNCD_CODE_DIR=/code \
//       node funcd-node.js
//
// Uses 'http' rather than a hand-written parser on 'net': measured on node 20,
// 'http' costs about 3 ms more of a ~70 ms start, which buys node's own
// robust parser.
const http = require('http');
const fs = require('fs');
const path = require('path');

const MAX_HEAD = 64 * 1024;
const MAX_BODY = 64 << 20;
const READY_PATH = '/_/ready';
// The exit status that tells the platform the handler could not be loaded
// (docs/worker-contract.md): the Function becomes HandlerLoadFailed.
const EXIT_HANDLER_LOAD = 3;
const FRAMING = new Set(['content-length', 'transfer-encoding', 'connection']);
const EMPTY = Buffer.alloc(0);

let inflight = 0;
let draining = false;

function log(severity, msg, fields) {
    process.stderr.write(JSON.stringify(Object.assign({ severity, msg }, fields)) + '\n');
}

function statusBody(code, reason, message) {
    return JSON.stringify({ kind: 'Status', code, reason, message });
}

class Request {
    constructor(req, body) {
        const url = req.url;
        const q = url.indexOf('?');
        this.method = req.method;
        this.path = q < 0 ? url : url.slice(0, q);
        this.query = q < 0 ? '' : url.slice(q + 1);
        this.headers = req.headers;
        this.body = body;
        this.invocationId = req.headers['x-funcd-invocation-id'] || '';
        this._args = undefined;
    }

    /** The query's parameters, first value of each. */
    get args() {
        if (this._args === undefined) {
            const args = {};
            for (const [name, value] of new URLSearchParams(this.query)) {
                if (!Object.hasOwn(args, name)) args[name] = value;
            }
            this._args = args;
        }
        return this._args;
    }

    text() {
        return this.body.toString('utf8');
    }

    /** The body parsed as JSON; null when there is no body. */
    json() {
        return this.body.length ? JSON.parse(this.text()) : null;
    }

    /** funcd.invoke on behalf of this request: the callee continues its trace. */
    invoke(name, body, opts) {
        const headers = Object.assign({}, (opts && opts.headers) || {});
        if (this.headers.traceparent && !headers.traceparent) headers.traceparent = this.headers.traceparent;
        return invokeFunction(name, body, Object.assign({}, opts, { headers }));
    }
}

// funcd.invoke(name, body, {path, method, headers}): calls Function `name` of this
// namespace (listed in spec.bindings.invoke) through the worker's local API, FUNCD_API
// (docs/services.md). Resolves to {status, headers, body (a Buffer), text(), json()}.
function invokeFunction(name, body, opts) {
    const o = opts || {};
    const api = process.env.FUNCD_API || '';
    if (!api.startsWith('unix:')) {
        return Promise.reject(new Error('FUNCD_API is not set: the Function has no spec.bindings'));
    }
    let data = body === undefined || body === null ? EMPTY : body;
    if (typeof data === 'string') data = Buffer.from(data, 'utf8');
    else if (!isBytes(data)) data = Buffer.from(JSON.stringify(data), 'utf8');
    const sub = o.path ? (o.path.startsWith('/') ? o.path : '/' + o.path) : '/';
    return new Promise((resolve, reject) => {
        const req = http.request({
            socketPath: api.slice(5), method: o.method || 'POST', path: `/fn/${name}${sub}`,
            headers: Object.assign({ 'content-length': data.length }, o.headers || {}),
        }, (res) => {
            const chunks = [];
            res.on('data', (c) => chunks.push(c));
            res.on('end', () => {
                const out = Buffer.concat(chunks);
                resolve({
                    status: res.statusCode, headers: res.headers, body: out,
                    text: () => out.toString('utf8'),
                    json: () => (out.length ? JSON.parse(out.toString('utf8')) : null),
                });
            });
            res.on('error', reject);
        });
        req.on('error', reject);
        req.end(data);
    });
}

// funcd.kv(store): a KVStore bound in spec.bindings.kv (docs/services.md). Every method
// returns a promise: get(key) -> {value (Buffer), revision, text(), json()} or null;
// put(key, value, {ifRevision, ttl}) -> revision (rejects with err.conflict on a CAS miss);
// delete(key, {ifRevision}) -> true/false; incr(key, by) -> the sum;
// list({prefix, limit, after}) -> {items: [{key, revision}], next}.
function apiCall(method, target, data) {
    const api = process.env.FUNCD_API || '';
    if (!api.startsWith('unix:')) {
        return Promise.reject(new Error('FUNCD_API is not set: the Function has no spec.bindings'));
    }
    return new Promise((resolve, reject) => {
        const req = http.request({ socketPath: api.slice(5), method, path: target,
            headers: { 'content-length': data.length } }, (res) => {
            const chunks = [];
            res.on('data', (c) => chunks.push(c));
            res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
            res.on('error', reject);
        });
        req.on('error', reject);
        req.end(data);
    });
}

function kvError(key, r) {
    const err = new Error(`KV ${key}: ${r.status} ${r.body.toString('utf8')}`);
    err.status = r.status;
    err.conflict = r.status === 409;
    return err;
}

function kvValue(v) {
    if (typeof v === 'string') return Buffer.from(v, 'utf8');
    if (isBytes(v)) return Buffer.from(v);
    return Buffer.from(JSON.stringify(v), 'utf8');
}

function kvStore(store) {
    const at = (key, q) => `/kv/${store}/${encodeURIComponent(key)}${q ? '?' + q : ''}`;
    const ok = (key, r) => { if (r.status >= 300) throw kvError(key, r); return r; };
    return Object.freeze({
        async get(key) {
            const r = await apiCall('GET', at(key), EMPTY);
            if (r.status === 404 && r.body.toString('utf8').includes('no key')) return null;
            ok(key, r);
            const value = r.body;
            return { value, revision: Number(r.headers['x-funcd-revision']),
                text: () => value.toString('utf8'), json: () => JSON.parse(value.toString('utf8')) };
        },
        async put(key, value, opts) {
            const q = new URLSearchParams();
            if (opts && opts.ifRevision !== undefined) q.set('ifRevision', String(opts.ifRevision));
            if (opts && opts.ttl !== undefined) q.set('ttl', String(opts.ttl));
            const r = ok(key, await apiCall('PUT', at(key, q.toString()), kvValue(value)));
            return JSON.parse(r.body.toString('utf8')).revision;
        },
        async delete(key, opts) {
            const q = opts && opts.ifRevision !== undefined ? `ifRevision=${opts.ifRevision}` : '';
            const r = await apiCall('DELETE', at(key, q), EMPTY);
            if (r.status === 404) return false;
            ok(key, r);
            return true;
        },
        async incr(key, by) {
            const r = ok(key, await apiCall('POST', at(key, `increment=${by === undefined ? 1 : by}`), EMPTY));
            return JSON.parse(r.body.toString('utf8')).value;
        },
        async list(opts) {
            const o = opts || {};
            const q = new URLSearchParams({ prefix: o.prefix || '', limit: String(o.limit || 100) });
            if (o.after) q.set('continue', o.after);
            const r = ok(o.prefix || '', await apiCall('GET', `/kv/${store}?${q}`, EMPTY));
            const doc = JSON.parse(r.body.toString('utf8'));
            return { items: doc.items, next: doc.continue || null };
        },
    });
}

globalThis.funcd = Object.freeze({ invoke: invokeFunction, kv: kvStore });

function isBytes(v) {
    return Buffer.isBuffer(v) || v instanceof Uint8Array;
}

// {status, headers, body} with nothing else is a response; any other object is JSON.
function isResponseObject(v) {
    if (typeof v !== 'object' || v === null || Array.isArray(v) || isBytes(v)) return false;
    const keys = Object.keys(v);
    return keys.length > 0 && keys.every((k) => k === 'status' || k === 'headers' || k === 'body') &&
        (v.status === undefined || Number.isInteger(v.status));
}

function encodeBody(body, headers) {
    let type, data;
    if (typeof body === 'string') [type, data] = ['text/plain; charset=utf-8', Buffer.from(body, 'utf8')];
    else if (isBytes(body)) [type, data] = ['application/octet-stream', Buffer.from(body.buffer, body.byteOffset, body.byteLength)];
    else if (body === undefined || body === null) [type, data] = [undefined, EMPTY];
    else [type, data] = ['application/json', Buffer.from(JSON.stringify(body), 'utf8')];
    if (type && !headers['content-type']) headers['content-type'] = type;
    return data;
}

function toResponse(result) {
    const headers = {};
    if (result === undefined || result === null) return { status: 204, headers, body: EMPTY };
    if (!isResponseObject(result)) return { status: 200, headers, body: encodeBody(result, headers) };
    const status = result.status === undefined ? 200 : result.status;
    if (status < 100 || status > 599) throw new RangeError(`status ${status} is not an HTTP status`);
    for (const [name, value] of Object.entries(result.headers || {})) headers[name.toLowerCase()] = value;
    return { status, headers, body: encodeBody(result.body, headers) };
}

function send(res, head, { status, headers, body }) {
    res.statusCode = status;
    for (const [name, value] of Object.entries(headers)) {
        if (!FRAMING.has(name)) res.setHeader(name, value); // throws on a bad name or value
    }
    res.setHeader('content-length', body.length);
    if (draining) res.setHeader('connection', 'close');
    res.end(head ? undefined : body);
}

function failure(message) {
    const body = Buffer.from(statusBody(500, 'FunctionFailed', message));
    return { status: 500, headers: { 'content-type': 'application/json' }, body };
}

function describe(err) {
    if (err instanceof Error) return err.message ? `${err.name}: ${err.message}` : err.name;
    return `non-error value ${String(err)}`;
}

async function invoke(handler, req, body, res) {
    const request = new Request(req, body);
    let response;
    try {
        response = toResponse(await handler(request));
    } catch (err) {
        log('ERROR', `handler threw ${describe(err)}`, {
            invocationId: request.invocationId,
            stack: err instanceof Error ? err.stack : undefined,
        });
        response = failure(`handler threw ${describe(err)}`);
    }
    try {
        send(res, req.method === 'HEAD', response);
    } catch (err) {
        log('ERROR', `bad response from handler: ${err.message}`, { invocationId: request.invocationId });
        for (const name of res.getHeaderNames()) res.removeHeader(name);
        send(res, req.method === 'HEAD', failure(`bad response from handler: ${err.message}`));
    }
}

function onRequest(handler, req, res) {
    inflight++;
    res.on('close', finished);
    const q = req.url.indexOf('?');
    const reqPath = q < 0 ? req.url : req.url.slice(0, q);
    if (reqPath === READY_PATH && (req.method === 'GET' || req.method === 'HEAD')) {
        req.resume();
        send(res, req.method === 'HEAD', { status: 200, headers: { 'content-type': 'text/plain' }, body: Buffer.from('ok\n') });
        return;
    }
    const chunks = [];
    let size = 0;
    req.on('data', (chunk) => {
        size += chunk.length;
        if (size <= MAX_BODY) chunks.push(chunk);
    });
    req.on('end', () => {
        if (size > MAX_BODY) {
            res.setHeader('connection', 'close');
            const body = Buffer.from(statusBody(413, 'RequestEntityTooLarge', 'request body too large'));
            send(res, false, { status: 413, headers: { 'content-type': 'application/json' }, body });
            return;
        }
        invoke(handler, req, chunks.length === 1 ? chunks[0] : Buffer.concat(chunks), res);
    });
}

function finished() {
    inflight--;
    if (draining && inflight === 0) process.exit(0);
}

async function loadHandler(spec, codeDir) {
    const hash = spec.indexOf('#');
    const file = path.resolve(codeDir, hash < 0 ? spec : spec.slice(0, hash));
    const name = hash < 0 || hash === spec.length - 1 ? 'handler' : spec.slice(hash + 1);
    let mod;
    try {
        mod = require(file);
    } catch (err) {
        if (err.code !== 'ERR_REQUIRE_ESM') throw err;
        mod = await import(require('url').pathToFileURL(file).href);
    }
    let handler = mod[name];
    if (handler === undefined && mod.default) handler = mod.default[name];
    if (typeof handler !== 'function') {
        const err = new TypeError(`${path.relative(codeDir, file) || file} does not export a function named "${name}"`);
        err.stack = undefined; // the shim's frames would only distract
        throw err;
    }
    return handler;
}

function drain() {
    if (draining) return;
    draining = true;
    server.close(); // stops accepting and closes idle keep-alive connections
    if (inflight === 0) process.exit(0);
}

let server;

// Generic mode (FUNCD_GENERIC=1): the platform starts this worker before any
// function needs it, so node's own start-up is paid in advance. It waits on
// the control socket FUNCD_LISTEN for one JSON line {"env": {...}, "cwd":
// "..."}, takes that environment (FUNCD_LISTEN becomes the real socket) and
// directory, and goes on as the function's worker.
function specialize() {
    const control = process.env.FUNCD_LISTEN;
    return new Promise((resolve) => {
        try { fs.unlinkSync(control); } catch (err) { /* not there yet */ }
        const ctl = require('net').createServer((conn) => {
            let buf = '';
            conn.on('data', (chunk) => {
                buf += chunk;
                const nl = buf.indexOf('\n');
                if (nl < 0) return;
                const msg = JSON.parse(buf.slice(0, nl));
                delete process.env.FUNCD_GENERIC;
                for (const [k, v] of Object.entries(msg.env || {})) process.env[k] = String(v);
                if (msg.cwd) process.chdir(msg.cwd);
                conn.end();
                ctl.close();
                try { fs.unlinkSync(control); } catch (err) { /* gone already */ }
                resolve();
            });
        });
        ctl.listen(control);
    });
}

async function main() {
    if (process.env.FUNCD_GENERIC === '1')
        await specialize();
    const listen = process.env.FUNCD_LISTEN;
    if (!listen) {
        process.stderr.write("funcd-node: FUNCD_LISTEN is not set (the platform sets it to the worker's socket path)\n");
        process.exit(2);
    }
    const spec = process.env.FUNCD_HANDLER || 'index.js#handler';
    const codeDir = process.env.FUNCD_CODE_DIR || process.cwd();
    let handler;
    try {
        handler = await loadHandler(spec, codeDir);
    } catch (err) {
        log('ERROR', `cannot load handler ${spec} from ${codeDir}: ${describe(err)}`, { stack: err ? err.stack : undefined });
        process.exit(EXIT_HANDLER_LOAD);
    }
    process.on('unhandledRejection', (err) => {
        log('ERROR', `unhandled promise rejection: ${describe(err)}`, { stack: err && err.stack });
    });
    const options = { maxHeaderSize: MAX_HEAD, requireHostHeader: false };
    server = http.createServer(options, (req, res) => onRequest(handler, req, res));
    // The gateway owns timeouts and reuses connections: never drop one on our own.
    server.keepAliveTimeout = 0;
    server.requestTimeout = 0;
    server.headersTimeout = 0;
    server.on('error', (err) => {
        log('ERROR', `cannot listen on ${listen}: ${err.message}`);
        process.exit(1);
    });
    try {
        fs.unlinkSync(listen); // a socket left behind by a previous worker
    } catch (err) {
        if (err.code !== 'ENOENT') throw err;
    }
    server.listen(listen);
    process.on('SIGTERM', drain);
    process.on('SIGINT', drain);
}

main();
