'use strict';
// Handlers the shim test drives; `handler` dispatches on the path so one worker
// covers every return shape.
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function echo(req) {
    return {
        method: req.method, path: req.path, query: req.query, args: req.args,
        headers: req.headers, text: req.text(), bodyLength: req.body.length,
        json: req.headers['content-type'] === 'application/json' ? req.json() : null,
        invocationId: req.invocationId,
    };
}

const routes = {
    '/text': () => 'hello text',
    '/bytes': () => Buffer.from([0, 1, 0x72, 0x61, 0x77]),
    '/list': () => [1, 'two'],
    '/status-object': () => ({ status: 'ok' }),
    '/triple': () => ({ status: 201, headers: { 'X-Custom': 'yes', 'Content-Type': 'text/csv' }, body: 'a,b\n' }),
    '/none': () => undefined,
    '/slow': async (req) => { await sleep(Number(req.args.s || 1) * 1000); return 'slept'; },
    '/boom': () => { throw new Error('boom'); },
    '/reject': async () => { throw new TypeError('rejected'); },
    '/badheader': () => ({ status: 200, headers: { 'x-evil': 'a\r\nInjected: 1' }, body: 'x' }),
};

exports.handler = (req) => (routes[req.path] || echo)(req);
exports.asyncHandler = async (req) => { await sleep(10); return { async: true, path: req.path }; };
